"""Shared pieces for the evaluation tests: small real models, a scripted model that answers by a rule
written here, targets for planning evaluators without the CLI, and nano checkpoints trained on CPU."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from torch import nn

from posbench.config import load_config
from posbench.data.tokenizers import ByteTokenizer
from posbench.evaluation.evaluator import NullProgress, Session, Target
from posbench.model.output import ModelOutput
from posbench.model.transformer import Transformer
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train

BYTES = ByteTokenizer(ByteTokenizer.Config(), ".").build()  # 257 ids
WORDS = ("the of and to in is was for on that with as by at from his an were are which this be river city "
         "number system theory garden window letter bridge").split()


def model_config(pe: str, *extra, seq_len: int = 64, vocab: int = 300):
    dims = dict(size="test", d_model=32, n_layers=2, n_heads=4, d_ff=64, seq_len=seq_len, vocab_size=vocab)
    return load_config(overrides=[f"model.{k}={v}" for k, v in dims.items()] + list(extra), pe_type=pe)


def small_model(pe: str, *extra, seed: int = 0, **kw) -> tuple[Transformer, object]:
    cfg = model_config(pe, *extra, **kw)
    torch.manual_seed(seed)
    return Transformer(cfg.model, cfg.pe).eval(), cfg


def target_for(cfg, lengths, batch_size: int = 4, seed: int = 0, label: str = "m") -> Target:
    return Target(label, Path("."), cfg, BYTES, sorted(lengths), seed, batch_size)


def session_for(model) -> Session:
    import contextlib

    return Session(model, torch.device("cpu"), contextlib.nullcontext, NullProgress())


def write_text(path: Path, n_words: int = 3000, seed: int = 0) -> Path:
    rng = random.Random(seed)
    path.write_text(" ".join(rng.choice(WORDS) for _ in range(n_words)))
    return path


class ScriptedCache:
    def __init__(self):
        self.rows: list[list[int]] | None = None
        self.length = 0


class ScriptedModel(nn.Module):
    """Logits that put all mass on `rule(history)` at the last position (uniform where it returns None).
    Keeps its own history in its cache, so it is driven exactly as the Transformer is."""

    def __init__(self, vocab_size: int, rule):
        super().__init__()
        self.vocab_size, self.rule = vocab_size, rule
        self.calls = []  # (batch, tokens) of each forward

    def new_cache(self) -> ScriptedCache:
        return ScriptedCache()

    def positions(self, T, device, offset=0):
        return torch.arange(offset, offset + T, dtype=torch.float32, device=device)

    def forward(self, idx_BT, targets_BT=None, pos_T=None, cache=None, *, logit_moments=False):
        rows = idx_BT.tolist()
        self.calls.append(tuple(idx_BT.shape))
        if cache is not None:
            cache.rows = rows if cache.rows is None else [a + b for a, b in zip(cache.rows, rows)]
            cache.length += idx_BT.shape[1]
            rows = cache.rows
        logits = torch.zeros(idx_BT.shape[0], idx_BT.shape[1], self.vocab_size)
        for b, hist in enumerate(rows):
            token = self.rule(hist)
            if token is not None:
                logits[b, -1, token] = 1.0
        return ModelOutput(logits=logits)


def nano_checkpoint(out_dir: Path, pe: str, *extra, run_name: str | None = None) -> Path:
    """A nano model trained for a few steps on random tokens, bytes tokenizer; returns its run dir."""
    overrides = ["model.seq_len=64", "model.vocab_size=512", "data.tokenizer.name=bytes",
                 "train.budget_unit=tokens", "train.target_budgets=[2048]", "train.global_batch_tokens=512",
                 "train.micro_batch=4", "train.eval_interval=0", "train.log_interval=1", "logging.wandb=disabled",
                 "schedule.warmup_tokens=512", f"train.out_dir={out_dir}", f"train.run_name={run_name or pe}",
                 *extra]
    cfg = load_config(model_size="nano", overrides=overrides, pe_type=pe)
    return Path(train(cfg, RandomTokens(cfg.model.vocab_size, cfg.model.seq_len))["run_dir"])
