"""One-line notes printed when a training run starts, for settings that are valid but easy to misread: each
says what the run will do that the user may not expect, once, before any step."""

from __future__ import annotations

from posbench.config import RunConfig
from posbench.data.corpus_sources import HubShards
from posbench.model.transformer import layer_window


def start_notes(cfg: RunConfig, pe) -> list[str]:
    return [n for n in (window_note(cfg, pe), mix_note(cfg)) if n]


def window_note(cfg: RunConfig, pe) -> str | None:
    """A sliding window (rnope_swa's pe.window, model.attention_window) at least as long as the training length
    is valid, since it binds at longer evaluation lengths, but in training every window is full attention."""
    seq = cfg.model.seq_len
    if pe is None:  # an architecture without attention layers (model.arch): no window
        return None
    wide = sorted({w for layer in range(cfg.model.n_layers) if (w := layer_window(cfg.model, pe, layer)) is not None
                   and w >= seq})
    if not wide:
        return None
    return (f"note: sliding window {', '.join(map(str, wide))} >= the training length {seq}: training attends to "
            f"every position (full attention); the window binds only at evaluation lengths above {wide[0]}")


def mix_note(cfg: RunConfig) -> str | None:
    """The default task mix goes into the train shards of any corpus, a user's own too: said once when the corpus
    is not the default one (data.source's default, the hub's FineWeb shards)."""
    mix, source = cfg.data.mix, cfg.data.source
    if cfg.train.stream != "shards" or not mix.active or source.name == HubShards.name:
        return None
    tasks = ", ".join(t.name for t in mix.tasks)
    return (f"note: the train shards of your corpus `{source.name}` mix in task documents ({mix.ratio:.0%} of "
            f"{mix.unit}: {tasks}) per data.mix; set data.mix.tasks=[] (and tokenize again) to train on the "
            "corpus alone")
