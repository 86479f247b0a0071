"""The training stage's settings: `optim.*`, `schedule.*`, `train.*`, `logging.*`.

Declared beside the code that reads them; the top-level `posbench.config` only assembles them into a
RunConfig. Imports nothing but `config_loader`, so any stage may read these types without pulling in
torch or the data stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from posbench.config_loader import Checked
from posbench.errors import ConfigError, brief
from posbench.threads import check_threads


@dataclass
class OptimConfig(Checked):
    lr: float = 1e-3  # peak learning rate (stable phase)
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1  # matrices only; see training/optim.py

    def check(self) -> None:
        if not self.lr > 0 or not 0 <= self.beta1 < 1 or not 0 <= self.beta2 < 1 or self.weight_decay < 0:
            raise ConfigError("optim: need lr > 0, 0 <= beta1, beta2 < 1, weight_decay >= 0")


DecayShape = Literal["linear", "1-sqrt", "cosine"]


@dataclass
class ScheduleConfig(Checked):
    """Warmup-stable-decay (Hu et al. 2024, MiniCPM; Hagele et al. 2024): the LR is a pure function of
    tokens seen and the budget, so resume and branching need no scheduler state."""

    warmup_tokens: int = 0  # 0: warmup_frac of the smallest budget
    warmup_frac: float = 0.02
    decay_frac: float = 0.2  # share of each budget spent decaying
    decay: DecayShape = "1-sqrt"
    min_lr_ratio: float = 0.0
    # DroPE's drop point is DroPE's own option (pe.drop_at): the one PE that has one validates it, and a study or
    # sweep row `{name: drope, drop_at: 0.9}` says it whole. A checkpoint whose config.yaml still has the key is
    # read with its value moved there (settings_migration.py)
    replaced_keys: ClassVar[dict[str, str]] = {
        "drop_pe_at": "DroPE's drop point is pe.drop_at, the PE's own option (a share of the budget in (0, 1), "
                      "e.g. pe.name=drope pe.drop_at=0.875)"}

    def check(self) -> None:
        if not (0 <= self.warmup_frac < 1 and 0 < self.decay_frac <= 1 and 0 <= self.min_lr_ratio <= 1):
            raise ConfigError("schedule: need 0 <= warmup_frac < 1, 0 < decay_frac <= 1, 0 <= min_lr_ratio <= 1")
        if self.warmup_tokens < 0:
            raise ConfigError(f"schedule.warmup_tokens must be >= 0, got {self.warmup_tokens}")


@dataclass
class TrainConfig(Checked):
    out_dir: str = "checkpoints"
    run_name: str = ""  # "": <size>_<pe>_<budget>_s<seed>
    target_budgets: list[float] = field(default_factory=lambda: [20.0, 40.0])
    budget_unit: Literal["tokens_per_param", "tokens"] = "tokens_per_param"
    global_batch_tokens: int = 524288
    micro_batch: int = 16  # sequences per rank per forward/backward
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU
    compile: bool = False  # torch.compile the model (inductor; every PE compiles with fullgraph=True)
    # LM head + cross-entropy: "chunked" fuses them over chunks of loss_chunk_tokens tokens so the (B, T, V)
    # logits never exist (model/loss.py); "auto" = chunked iff model.vocab_size >= 32768; "full" = plain
    loss: Literal["auto", "chunked", "full"] = "auto"
    loss_chunk_tokens: int = 512
    parallel: Literal["ddp", "fsdp"] = "ddp"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    grad_clip: float = 1.0  # 0 disables clipping (the finite check stays)
    log_interval: int = 10  # steps
    eval_interval: int = 250  # steps; 0 disables validation
    eval_batches: int = 8
    ckpt_interval: int = 500  # steps; 0: only branch, signal and final checkpoints
    keep_last: int = 3
    keep_best: bool = True  # on each validation that improves the loss: a checkpoint and the `best` link
    resume: str = ""  # "", "auto" or a checkpoint path
    allow_resume_mismatch: bool = False
    branch_from: str = ""  # checkpoint saved before a budget's decay
    budget: float = 0.0  # with branch_from: the budget (in budget_unit) whose decay to run
    max_steps: int = 0  # > 0: stop after this many steps (smoke runs); the schedule is unchanged
    # what the loop reads: "shards" (tokenized data under data.root), "random" tokens (smoke runs,
    # benchmarks; nothing to learn) or "task": data.task's own rows (what a study cell trains on)
    stream: Literal["shards", "random", "task"] = "shards"
    # intra-op threads of this process (posbench/threads.py): a count, or "auto" = what the launcher set
    # (OMP_NUM_THREADS, a pool's share) else 1; never the load of the moment, since another count rounds
    # differently. Recorded in meta.json; a resume with "auto" reuses the checkpoint's count
    threads: int | Literal["auto"] = "auto"

    # what one command asks of the run (--resume, --branch-from, --budget, a smoke run's step count), not what the
    # run is: left out of the config.yaml saved with each checkpoint (training/meta.run_config_yaml)
    INVOCATION: ClassVar[tuple[str, ...]] = ("resume", "branch_from", "budget", "max_steps")

    def check(self) -> None:
        if not self.target_budgets or any(b <= 0 for b in self.target_budgets):
            raise ConfigError(f"train.target_budgets must be positive numbers, got {brief(self.target_budgets)}")
        positive = ("global_batch_tokens", "micro_batch", "log_interval", "eval_batches", "loss_chunk_tokens")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"train.{name} must be > 0, got {getattr(self, name)}")
        if self.keep_last < 2:
            raise ConfigError(f"train.keep_last must be >= 2 (a corrupt latest checkpoint falls back to the "
                              f"previous one), got {self.keep_last}")
        if self.grad_clip < 0 or self.eval_interval < 0 or self.ckpt_interval < 0 or self.max_steps < 0:
            raise ConfigError("train.grad_clip, eval_interval, ckpt_interval and max_steps must be >= 0")
        if self.threads != "auto":
            check_threads(self.threads, "train.threads")
        if bool(self.branch_from) != bool(self.budget):
            raise ConfigError("train.branch_from and train.budget go together (--branch-from CKPT --budget N)")


@dataclass
class LoggingConfig:
    wandb: Literal["auto", "online", "offline", "disabled"] = "auto"  # auto: online iff WANDB_API_KEY is set
    project: str = "pos-enc-bench"
    entity: str = ""
    group: str = ""
