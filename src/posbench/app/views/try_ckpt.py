"""Try a checkpoint: a typed prompt (the checkpoint's tokenizer) or a task example (ID/OOD), its greedy
continuation, and the attention of the generated tokens. A checkpoint pretrained with a task mix is asked
its mix's tasks as text, in the format it saw (as eval.py asks them); a study checkpoint, trained on a
task's own symbols (its config says train.stream=task and names data.task), is asked that task, with its
options, in those symbols."""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st
import yaml

from posbench.app import charts
from posbench.app.outputs import study_checkpoints_note
from posbench.app.probe import continue_ids, generated_attention, scored_tokens, task_prompt, tokens_right
from posbench.config_loader import from_dict, to_dict
from posbench.data.layout import DataLayout
from posbench.data.tasks.task import TaskConfig, build_task, task_names
from posbench.errors import ConfigError, DataError
from posbench.evaluation.generate import decode as decode_ids
from posbench.evaluation.loading import CheckpointError, load_model, resolve_checkpoint
from posbench.evaluation.suites.algorithmic import pretrained_with_mix


@st.cache_resource(max_entries=4, show_spinner="loading the checkpoint")
def _load(step_dir: str, mtime: float):  # mtime: a re-saved checkpoint is loaded again
    return load_model(step_dir)


def page() -> None:
    st.header("Try a checkpoint")
    path = st.text_input("Checkpoint (a run directory, its `latest`, or a step_N directory)", key="try_path")
    if not path.strip():
        return
    try:
        step_dir = resolve_checkpoint(path.strip())
        loaded = _load(str(step_dir), (step_dir / "model.pt").stat().st_mtime)
    except (CheckpointError, ConfigError, OSError) as e:
        st.error(f"Cannot load the checkpoint: {study_checkpoints_note(Path(path.strip())) or e}")
        return
    cfg = loaded.cfg
    st.caption(f"{step_dir}: step {loaded.meta.get('step', '?')}, PE `{cfg.pe.name}`, d_model {cfg.model.d_model}, "
               f"{cfg.model.n_layers} layers, {cfg.model.n_heads} heads, trained at {cfg.model.seq_len} tokens")
    mode = st.radio("Prompt", ["Type a prompt", "Task example"], horizontal=True, key="try_mode")
    if mode == "Type a prompt":
        got = _typed(cfg)
    else:
        got = _mix_example(cfg) if pretrained_with_mix(cfg) else _task_example(cfg)
    if got is None:
        return
    prompt, expected, n_new, decode, scored = got
    new = continue_ids(loaded.model, prompt, n_new)
    if new is None:
        st.warning(f"n/a: the PE `{cfg.pe.name}` cannot represent {len(prompt) + n_new - 1} positions")
        return
    st.markdown(f"**Prompt** ({len(prompt)} tokens): `{decode(prompt)}`")
    st.markdown(f"**Greedy continuation**: `{decode(new)}`")
    if expected is not None:
        right, counted = tokens_right(new, expected, scored)
        skipped = len(expected) - counted
        st.markdown(f"**Expected**: `{decode(expected)}` — {right} / {counted} answer tokens right"
                    + (f" ({skipped} separator{'s' * (skipped > 1)} not counted)" if skipped else ""))
    probs = generated_attention(loaded.model, prompt, new)
    if not probs:
        st.info(f"`{cfg.model.arch.name}` has no attention layers: no attention map.")
        return
    cols = st.columns(2)
    layer = cols[0].selectbox("Layer", list(range(len(probs))), key="try_layer")
    head = cols[1].selectbox("Head", list(range(len(probs[layer]))), key="try_head")
    keys = [decode([t]) for t in prompt + new[:-1]]
    first = len(prompt) - 1  # row n is the query at this position + n, which produced generated token n
    st.plotly_chart(charts.attention_map(probs[layer][head], keys[first:], keys,
                                         f"attention of the generated tokens: layer {layer}, head {head} (row: the "
                                         "query position that produced the next token)", q_start=first),
                    key="try_attn")


def _tokenizer(cfg):
    try:
        return DataLayout.from_config(cfg.data).tokenizer.build()
    except (DataError, ConfigError, OSError) as e:
        st.error(f"Cannot build the checkpoint's tokenizer `{cfg.data.tokenizer.name}`: {e} (start the app in "
                 "the directory the checkpoint was trained in)")
        return None


def _typed(cfg):
    text = st.text_area("Prompt" + (" (the task's symbols, separated by spaces)" if cfg.data.task else ""),
                        key="try_text")
    n_new = st.number_input("New tokens", 1, 512, 16, key="try_n")
    if text and cfg.train.stream == "task":
        return _typed_symbols(cfg, text, int(n_new))
    if not text or (tok := _tokenizer(cfg)) is None:
        return None
    # <|bos|> first, as training documents and task prompts start: without it the model sees a context it never
    # trained on
    ids = [tok.bos_id, *tok.encode(text)]
    if max(ids) >= cfg.model.vocab_size:
        st.error(f"The prompt encodes to ids outside the model's vocabulary ({cfg.model.vocab_size})")
        return None
    return ids, None, int(n_new), functools.partial(decode_ids, tok), None


def _mix_example(cfg):
    """A task of the checkpoint's mix, as text: <|bos|> + the prompt, the answer's tokens expected."""
    tasks = {t.name: t for t in cfg.data.mix.tasks}
    cols = st.columns(3)
    name = cols[0].selectbox("Task (from the checkpoint's mix)", list(tasks), key="try_mix_task")
    split = cols[1].radio("Split", ["id", "ood"], horizontal=True, key="try_split")
    index = cols[2].number_input("Example", 0, 10**6, 0, key="try_index")
    if (tok := _tokenizer(cfg)) is None:
        return None
    ex = build_task(tasks[name]).example(0, int(index), split)
    expected, decode = tok.encode(ex.answer), functools.partial(decode_ids, tok)
    return [tok.bos_id, *tok.encode(ex.prompt)], expected, len(expected), decode, scored_tokens(expected, decode)


def _typed_symbols(cfg, text: str, n_new: int):
    """A task model (train.stream=task) has no tokenizer: its tokens are its task's symbols, typed by name."""
    vocab = build_task(cfg.data.task).vocab
    unknown = [s for s in text.split() if s not in vocab.symbols]
    if unknown:
        st.error(f"{', '.join(unknown[:5])}: not symbols of task `{cfg.data.task.name}`, whose symbols are "
                 f"{' '.join(vocab.symbols)}")
        return None
    return vocab.ids(text.split()), None, n_new, lambda ids: " ".join(vocab.decode(ids)), None


def _own_task(cfg) -> tuple[str | None, str]:
    """A study checkpoint's task and the options it changed from the task's defaults, as the form's YAML; (None,
    "{}") for a checkpoint that did not train on one task's rows."""
    if cfg.train.stream != "task" or cfg.data.task is None:
        return None, "{}"
    own, default = to_dict(cfg.data.task), to_dict(type(cfg.data.task)())
    changed = {k: v for k, v in own.items() if k != "name" and v != default.get(k)}
    return cfg.data.task.name, yaml.safe_dump(changed, default_flow_style=True).strip() if changed else "{}"


def _task_example(cfg):
    cols = st.columns(4)
    own, own_fields = _own_task(cfg)
    names = task_names()
    name = cols[0].selectbox("Task" + (" (the checkpoint trained on the first)" if own else ""),
                             [own, *(n for n in names if n != own)] if own else names, key="try_task")
    fields = cols[1].text_input("Task fields (YAML mapping)", own_fields if name == own else "{}", key="try_fields")
    split = cols[2].radio("Split", ["id", "ood"], horizontal=True, key="try_split")
    index = cols[3].number_input("Example", 0, 10**6, 0, key="try_index")
    try:
        extra = yaml.safe_load(fields) or {}
        if not isinstance(extra, dict):
            raise ConfigError(f"task fields: expected a mapping like {{k: 3}}, got `{fields}`")
        task = build_task(from_dict(TaskConfig, {**extra, "name": name}, "task"))
        prompt, expected = task_prompt(task, 0, int(index), split)
    except (ConfigError, ValueError, yaml.YAMLError) as e:
        st.error(f"The task config does not validate: {e}")
        return None
    if task.vocab.size > cfg.model.vocab_size:
        st.error(f"Task `{name}` has {task.vocab.size} symbols but the model only {cfg.model.vocab_size} ids: this "
                 "checkpoint was not trained on this task's tokens")
        return None
    symbols = lambda ids: " ".join(task.vocab.decode(ids))
    return prompt, expected, len(expected), symbols, [True] * len(expected)  # every target is an answer symbol
