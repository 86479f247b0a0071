"""Train runs that differ only in seed as one batched model: the members' parameters stacked on a leading
dim (`torch.func.stack_module_state`), one forward and backward for all of them through `torch.vmap` over
`functional_call`, one AdamW over the stacked tensors. Every member follows the trajectory its lone run
(`training.loop.train` with the same config) follows, up to float rounding:

- init: each member's model is built as its lone run builds it (`torch.manual_seed(seed)`, then
  `build_model`), then stacked;
- data: each member reads its own source at the lone run's indices (`micro_indices`);
- dropout: each member's masks come from its own generator, seeded where its lone run's global generator
  stands after the build (studies/member_dropout.py);
- optimizer: AdamW is per element, so one AdamW over stacked tensors is each member's AdamW; weight decay
  uses the lone run's groups (`param_groups`, by name); gradient clipping uses each member's own norm
  (`clip_grad_norm_`'s formula per member);
- the schedule is the lone run's (`make_plan`), the same for every member.

The loop is the lone loop's steps without what a study does not use (checkpoints on disk, validation,
resume, branches, logging backends): `why_not_batched` names the settings that need those, and
`BatchedGroup.probe` runs one vmapped step before training, so anything the vmap cannot batch (an
operation without a batching rule, a PE that draws random numbers in its forward) is found before any
step, and the caller trains those cells separately, printing the reason.

Shape legend: M members, B batch, T tokens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
from torch.func import functional_call, stack_module_state

from posbench.config import RunConfig
from posbench.errors import NonFiniteError
from posbench.model.build import build_model
from posbench.model.flops import stats_of
from posbench.studies.member_dropout import NoiseFeed, swap_dropout
from posbench.targets import positions_of
from posbench.training.batch_sources import BatchSource, bind_documents, micro_indices
from posbench.training.device import FP32, choose_precision, device_type_for
from posbench.training.optim import param_groups, set_lr
from posbench.training.plan import loss_chunk_tokens, make_plan

# member index, step, the member's model (eval mode, no grad)
MemberSnapshots = Callable[[int, int, torch.nn.Module], None]

# Settings a batched group does not reproduce, each with the reason a user reads (see the module docstring).
UNBATCHED_SETTINGS: tuple[tuple[Callable[[RunConfig], bool], str], ...] = (
    (lambda c: device_type_for(c) != "cpu", "train.device is not cpu: on CUDA dropout draws with a fused kernel "
                                           "whose masks a member cannot reproduce from its own generator"),
    (lambda c: c.train.compile, "train.compile: a compiled model is traced per run"),
    (lambda c: type(choose_precision(c.train.precision, device_type_for(c))) is not FP32,
     "train.precision is not fp32: autocast is not reproduced under vmap here"),
    (lambda c: c.model.attn_dropout > 0, "model.attn_dropout > 0 draws inside the attention kernel, out of a "
                                         "member's own stream"),
    (lambda c: len(c.train.target_budgets) > 1, "several train.target_budgets save branch checkpoints"),
    (lambda c: c.pe.drop_share() is not None, "pe.drop_at (DroPE) swaps the model's PE mid-run"),
    (lambda c: bool(c.train.max_steps or c.train.eval_interval or c.train.resume or c.train.branch_from),
     "train.max_steps, eval_interval, resume and branch_from need the full trainer"),
)


def why_not_batched(cfg: RunConfig) -> str | None:
    """The first setting of `cfg` a batched group cannot reproduce, as a sentence; None when it can batch."""
    return next((reason for applies, reason in UNBATCHED_SETTINGS if applies(cfg)), None)


def _lone_model(cfg: RunConfig) -> tuple[torch.nn.Module, torch.Tensor]:
    """The model the lone run builds, and its global generator's state right after (its dropout stream)."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.pe, "cpu", loss_chunk_tokens(cfg), train=True)
    return model, torch.get_rng_state()


class BatchedGroup:
    """Members' models stacked, with what one batched step needs. `cfgs` differ only in `seed` (and run
    names): studies/seed_groups.py groups them so."""

    def __init__(self, cfgs: list[RunConfig], sources: list[BatchSource]):
        outer_rng = torch.get_rng_state()
        self.cfgs = [bind_documents(c, s) for c, s in zip(cfgs, sources)]
        self.sources = sources
        built = [_lone_model(c) for c in self.cfgs]
        self.models = [m for m, _ in built]  # the members alone: snapshots are scored on these
        self.generators = []
        for _, state in built:
            g = torch.Generator()
            g.set_state(state)
            self.generators.append(g)
        self.feed = NoiseFeed()
        # The module vmap runs (its own tensors are replaced at every call). Its attention is the eager kernel,
        # the reference every kernel is tested against: SDPA's CPU kernel has no vmap batching rule, so
        # functorch would call it once per member and stack the results (8% of a quickstart group's step).
        # The lone runs keep their kernel; the two agree up to float rounding.
        self.template = _lone_model(dataclasses.replace(
            self.cfgs[0], model=dataclasses.replace(self.cfgs[0].model, attention="eager")))[0]
        torch.set_rng_state(outer_rng)  # the caller's stream is left as it was
        swap_dropout(self.template, self.feed)
        self.template.train()
        params, self.buffers = stack_module_state(self.models)
        self.params = {name: p.detach().requires_grad_() for name, p in params.items()}
        self.names = list(self.params)

        def member_loss(p, b, noise, x_BT, y_BT, *data_pos_BT):
            self.feed.load(noise)
            kwargs = {"data_pos_BT": data_pos_BT[0]} if data_pos_BT else {}  # a task's own position ids
            return functional_call(self.template, (p, b), (x_BT, y_BT), kwargs).loss

        # randomness="error": a random draw inside the forward (a randomized PE) cannot be given each member's
        # own stream here, so it stops the probe and the group trains separately
        self.member_losses = torch.vmap(member_loss, randomness="error")

    def probe(self) -> None:
        """One batched forward and backward on the first batch, recording the dropout calls; gradients are
        dropped and no generator moves, so training starts where it would without it."""
        self.feed.record()
        try:
            self.member_losses(self.params, self.buffers, [], *self.batch(0, 0, 1)).sum().backward()
        finally:
            self.feed.stop_recording()
            for p in self.params.values():
                p.grad = None

    def batch(self, step: int, micro: int, accum: int) -> tuple[torch.Tensor, ...]:
        """Each member's rows at the lone run's indices: (x_MBT, y_MBT), then the data's position ids
        (M, B, T) when the task defines them (`targets.positions_of`)."""
        mb = self.cfgs[0].train.micro_batch
        rows = [s.samples(micro_indices(step, micro, mb, accum, 0, 1)) for s in self.sources]
        pos = [positions_of(r) for r in rows]
        out = (torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows]))
        return out if pos[0] is None else (*out, torch.stack(pos))

    def load_member(self, m: int) -> torch.nn.Module:
        """Member m's current weights (and buffers, should a forward have updated any) copied into its lone
        model, returned in eval mode."""
        model = self.models[m]
        with torch.no_grad():
            own = dict(model.named_parameters())
            for name in self.names:
                own[name].copy_(self.params[name][m])
            for name, b in model.named_buffers():
                if name in self.buffers:
                    b.copy_(self.buffers[name][m])
        return model.eval()

    def optimizer(self) -> torch.optim.AdamW:
        """The lone run's AdamW (training/optim.py) over the stacked tensors, its decay groups by name."""
        cfg = self.cfgs[0].optim
        ids = {id(p): name for name, p in self.models[0].named_parameters()}
        groups = [{**g, "params": [self.params[ids[id(p)]] for p in g["params"]]}
                  for g in param_groups(self.models[0], cfg.weight_decay)]
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=False)

    def clip(self, max_norm: float) -> torch.Tensor:
        """`clip_grad_norm_` per member: each member's total gradient norm and its own clip coefficient."""
        grads = [self.params[name].grad for name in self.names if self.params[name].grad is not None]
        M = len(self.models)
        norms_PM = torch.stack([torch.linalg.vector_norm(g.reshape(M, -1), 2, dim=1) for g in grads])
        total_M = torch.linalg.vector_norm(norms_PM, 2, dim=0)
        coef_M = torch.clamp(max_norm / (total_M + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef_M.reshape(M, *[1] * (g.ndim - 1)))
        return total_M


def train_group(cfgs: list[RunConfig], sources: list[BatchSource], snapshots: MemberSnapshots,
                names: list[str] | None = None, group: BatchedGroup | None = None) -> list[list[dict]]:
    """Train the members to the end of their (shared) budget; returns each member's loss rows
    [{"step", "loss"}] at the lone run's log steps. `snapshots(m, step, model)` sees member m at every
    train.ckpt_interval and at the end, as the lone run's `snapshots` does. `group`: one already built and
    probed (the caller's fallback decision), else built and probed here."""
    names = names or [f"seed {c.seed}" for c in cfgs]
    return _train(cfgs, sources, snapshots, names, group or _probed(cfgs, sources))


def _train(cfgs, sources, snapshots, names, group) -> list[list[dict]]:
    cfg = group.cfgs[0]
    plan = make_plan(cfg, 1, "cpu", stats_of(group.models[0], cfg.model))
    optimizer = group.optimizer()
    M, accum, gbt = len(cfgs), plan.accum, cfg.train.global_batch_tokens
    clip = cfg.train.grad_clip if cfg.train.grad_clip > 0 else float("inf")
    rows: list[list[dict]] = [[] for _ in range(M)]
    step, tokens = 0, 0
    while tokens < plan.end_tokens:
        lr = plan.schedule.lr(tokens)
        set_lr(optimizer, lr)
        loss_sum_M = torch.zeros(M)
        for micro in range(accum):
            batch = group.batch(step, micro, accum)
            noise = group.feed.draw(group.generators)
            loss_M = group.member_losses(group.params, group.buffers, noise, *batch)
            (loss_M / accum).sum().backward()  # members share no parameter: each gets its own gradient
            loss_sum_M += loss_M.detach() / accum
        norm_M = group.clip(clip)
        bad = [names[m] for m in range(M) if not (math.isfinite(loss_sum_M[m]) and math.isfinite(norm_M[m]))]
        if bad:
            raise NonFiniteError(f"non-finite loss or gradient at step {step} in {', '.join(bad)} (batched with "
                                 f"{', '.join(names)}); stopped before the optimizer step. Lower optim.lr or "
                                 f"check the data.")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        log_now = (step + 1) % cfg.train.log_interval == 0 or tokens + gbt >= plan.end_tokens
        step, tokens = step + 1, tokens + gbt
        if log_now:
            for m, loss in enumerate(loss_sum_M.tolist()):
                rows[m].append({"step": step, "loss": loss})
        last = tokens >= plan.end_tokens
        if last or (cfg.train.ckpt_interval and step % cfg.train.ckpt_interval == 0):
            _snapshot_members(group, snapshots, step)
    return rows


def _probed(cfgs, sources) -> BatchedGroup:
    group = BatchedGroup(cfgs, sources)
    group.probe()
    return group


def _snapshot_members(group: BatchedGroup, snapshots: MemberSnapshots, step: int) -> None:
    rng = torch.get_rng_state()  # as the lone loop's _snapshot: scoring cannot move any stream
    with torch.no_grad():
        for m in range(len(group.models)):
            snapshots(m, step, group.load_member(m))
    torch.set_rng_state(rng)
