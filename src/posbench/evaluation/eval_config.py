"""Typed options of eval.py, loaded strictly like the run config (unknown keys name the nearest one).

Sources merge left to right: dataclass defaults <- --config YAML files <- flags (--suite, --lengths,
--rope-scaling, ...) <- --set key.sub=value overrides. Defaults are materialised first, so a partial
override of a polymorphic field (`--set ppl.data.root=/data`, `--set passkey.task.key_digits=3`) keeps
the variant's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Literal

from posbench.config_loader import Checked, Override, load, to_dict
from posbench.errors import ConfigError
from posbench.evaluation.dope_config import DopeConfig
from posbench.evaluation.lengths import check_lengths
from posbench.evaluation.ppl_data import PplDataConfig
from posbench.evaluation.suites import ALL, SUITES, get_suite, suite_names
from posbench.pe.rope_scaling import ScalingConfig
from posbench.threads import check_threads


@dataclass
class EvalOptions(Checked):
    """eval.py's options shared by every suite; EvalConfig adds one field per suite (its `options`)."""

    suites: list[str] = field(default_factory=lambda: ["all"])  # ppl, algorithmic, passkey, niah, lambada, or all
    lengths: list[int] = field(default_factory=list)  # [] = 0.5x, 1x, 2x, 4x, 8x each checkpoint's seq_len
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU
    batch_size: int = 8  # prompts per generation batch; ppl: about batch_size x seq_len tokens per forward
    seed: int = 0  # which task examples are asked
    progress: bool = True
    data_root: str = ""  # "" = each checkpoint's data.root (tokenizer files, shards)
    # evaluate even when the tokenizer built now is not the one the checkpoint was trained with
    allow_tokenizer_mismatch: bool = False
    rope_scaling: ScalingConfig | None = None  # RoPE length extension applied at evaluation time
    # DoPE (evaluation/dope.py): chosen heads of a rotary model denoised at each length, after --rope-scaling
    dope: DopeConfig | None = None
    # intra-op threads (posbench/threads.py): a count, or "auto" = what the launcher set (OMP_NUM_THREADS)
    # else 1, the fastest for small models on a shared CPU (docs/performance.md); recorded in results.json
    threads: int | Literal["auto"] = "auto"
    # > 0: at most this many items per suite cell (length, depth, task/split/shots), the first ones of the full
    # run, as lm-eval's --limit (a quick look: `--suite all` on a nano model at 3 lengths asks ~6,700 items)
    limit: int = 0

    def check(self) -> None:
        for name in self.suites:
            if name != "all":
                get_suite(name)  # unknown names fail here, with the nearest valid one
        if not self.suites:
            raise ConfigError("suites is empty; pick from " + ", ".join([*suite_names(), "all"]))
        check_lengths(self.lengths, "lengths")  # 2 .. 2**24 tokens (evaluation/lengths.py)
        if self.threads != "auto":
            check_threads(self.threads, "threads")
        if self.limit < 0:
            raise ConfigError(f"limit must be >= 0 (0 = every item), got {self.limit}")
        if self.batch_size < 1 or self.seed < 0:
            raise ConfigError("batch_size must be >= 1 and seed >= 0")
        if self.dope is not None and self.dope.calibration_seed == self.seed:
            raise ConfigError(f"dope.calibration_seed {self.seed} is the evaluation's seed, so DoPE would calibrate on "
                              "the prompts it scores; give --seed or dope.calibration_seed another value")
        if self.dope is not None:
            without = [name for name in self.suite_list() if not get_suite(name).calibrates_dope]
            if without:
                with_it = [name for name in suite_names() if get_suite(name).calibrates_dope]
                raise ConfigError(f"--dope calibrates on each suite's own data at each length, which suite(s) "
                                  f"{', '.join(without)} do not draw; run --dope with --suite {','.join(with_it)}")

    def suite_list(self) -> list[str]:
        names = ALL if "all" in self.suites else self.suites
        return list(dict.fromkeys(names))

    def suite_config(self, name: str):
        """The suite's options, capped at `limit` items per cell when set."""
        options = getattr(self, name)
        return get_suite(name).limited(options, self.limit) if self.limit else options

    def lengths_for(self, train_len: int) -> list[int]:
        if self.lengths:
            return sorted(set(self.lengths))
        # 0.5x .. 8x the training length: in distribution, at the edge, and 2-8x beyond it
        return [max(2, train_len // 2), train_len, 2 * train_len, 4 * train_len, 8 * train_len]


def text_suites() -> list[str]:
    """The suites that read the perplexity text (an options field `data` holding a PplDataConfig: ppl, first_token):
    eval's --ppl-text and --ppl-data name that text for each of them."""
    return [name for name in suite_names()
            if isinstance(getattr(SUITES[name].options(), "data", None), PplDataConfig)]


def _with_suite_fields(base: type) -> type:
    """`base` plus one field per registered suite (`--set ppl.stride=64`), in the suites' order, so a new
    suite needs no line here."""
    suites = sorted(SUITES, key=lambda name: SUITES[name].order)
    fields = [(name, SUITES[name].options, field(default_factory=SUITES[name].options)) for name in suites]
    cls = make_dataclass("EvalConfig", fields, bases=(base,))
    cls.__module__ = __name__  # picklable as eval_config.EvalConfig (make_dataclass takes module= from 3.12)
    return cls


EvalConfig = _with_suite_fields(EvalOptions)


def load_eval_config(files: list[str] = (), overrides: list[Override] = ()) -> EvalConfig:
    # the run config's loader, over the materialised defaults (see the module docstring)
    return load(EvalConfig, files, overrides, base=to_dict(EvalConfig()))
