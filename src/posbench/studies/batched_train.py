"""Train runs that differ only in seed (or in PE options that stack) as one batched model: the members'
parameters stacked on a leading dim (`torch.func.stack_module_state`), one forward and backward for all of them
through `torch.vmap` over `functional_call`, one AdamW over the stacked tensors. Every member follows the
trajectory its lone run (`training.loop.train` with the same config) follows, up to float rounding:

- init: each member's model is built as its lone run builds it (`torch.manual_seed(seed)`, then
  `build_model` on the host, as `training/start.py` does before moving it), then stacked and moved to the run's
  device (`train.device`);
- data: each member reads its own rows at the lone run's indices (`micro_indices`), from tables moved to the
  device once and shared by the members that read the same rows (studies/device_rows.py);
- dropout: on CPU each member's masks come from its own generator, seeded where its lone run's global generator
  stands after the build; on CUDA from a generator of its own seed (studies/member_dropout.py says why);
- precision: the lone run's autocast (`train.precision`: fp32, or bf16 on CUDA) around the batched forward;
- optimizer: AdamW is per element, so one AdamW over stacked tensors is each member's AdamW; weight decay
  uses the lone run's groups (`param_groups`, by name); gradient clipping uses each member's own norm
  (`clip_grad_norm_`'s formula per member);
- the schedule is the lone run's (`make_plan`), the same for every member;
- the step runs eagerly on CPU and is replayed from a CUDA graph on CUDA (studies/batched_step.py).

Members may differ in their PE's options when the PE's tensors stack (the same names and shapes: RoPE at two
bases, say): the shared module is the first member's, so `BatchedGroup` checks before any step that it gives every
member its own model's loss on the first batch (`MembersDiffer` otherwise: an option that changes the code, not a
tensor, such as a window, cannot batch).

The loop is the lone loop's steps without what a study does not use (checkpoints on disk, validation,
resume, branches, logging backends): `why_not_batched` names the settings that need those, and
`BatchedGroup.probe` runs one vmapped step before training, so anything the vmap cannot batch (an
operation without a batching rule, a PE that draws random numbers in its forward) is found before any
step, and the caller trains those cells separately, printing the reason.

Shape legend: M members, B batch, T tokens.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable

import torch
from torch.func import functional_call, stack_module_state

from posbench.config import RunConfig
from posbench.config_loader import to_dict
from posbench.errors import NonFiniteError
from posbench.model.build import build_model
from posbench.model.flops import stats_of
from posbench.studies.batched_step import make_step
from posbench.studies.device_rows import DeviceRows
from posbench.studies.member_dropout import NoiseFeed, member_stream, swap_dropout
from posbench.training.batch_sources import BatchSource, bind_documents, micro_indices
from posbench.training.device import FP16, choose_precision, device_type_for
from posbench.training.optim import param_groups, set_lr
from posbench.training.plan import loss_chunk_tokens, make_plan

# fp32 on the host: the shared module's loss and a member's own agree to ~5e-7 (tests/studies/test_batched_seeds.py),
# while an option that changes the code (a window, a fraction) moves an initial loss by more than 1e-4
STACK_RTOL = 2e-5

# member index, step, the member's model (eval mode, no grad)
MemberSnapshots = Callable[[int, int, torch.nn.Module], None]

# Settings a batched group does not reproduce, each with the reason a user reads (see the module docstring).
UNBATCHED_SETTINGS: tuple[tuple[Callable[[RunConfig], bool], str], ...] = (
    (lambda c: c.train.compile, "train.compile: a compiled model is traced per run (a batched step on CUDA is "
                                "replayed from a CUDA graph instead)"),
    (lambda c: isinstance(choose_precision(c.train.precision, device_type_for(c)), FP16),
     "train.precision fp16 scales each run's loss with its own GradScaler"),
    (lambda c: c.model.attn_dropout > 0, "model.attn_dropout > 0 draws inside the attention kernel, out of a "
                                         "member's own stream"),
    (lambda c: len(c.train.target_budgets) > 1, "several train.target_budgets save branch checkpoints"),
    (lambda c: c.pe.drop_share() is not None, "a PE switch point (DroPE's pe.drop_at, RePo's pe.rope_until) swaps "
                                              "the model's PE mid-run"),
    (lambda c: bool(c.train.max_steps or c.train.eval_interval or c.train.resume or c.train.branch_from),
     "train.max_steps, eval_interval, resume and branch_from need the full trainer"),
)


def why_not_batched(cfg: RunConfig) -> str | None:
    """The first setting of `cfg` a batched group cannot reproduce, as a sentence; None when it can batch."""
    return next((reason for applies, reason in UNBATCHED_SETTINGS if applies(cfg)), None)


class MembersDiffer(ValueError):
    """A member's PE options are not all in its tensors: the shared module does not give it its own loss."""


def pe_key(cfg: RunConfig) -> str:
    """A member's PE and its options: members with one key run the very module their lone runs build."""
    return json.dumps(to_dict(cfg.pe), sort_keys=True, default=str)


def _lone_model(cfg: RunConfig) -> tuple[torch.nn.Module, torch.Tensor]:
    """The model the lone run builds, and its global generator's state right after (its dropout stream)."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.pe, "cpu", loss_chunk_tokens(cfg), train=True)
    return model, torch.get_rng_state()


class BatchedGroup:
    """Members' models stacked on the run's device, with what one batched step needs. `cfgs` differ only in
    `seed`, run names and stackable PE options: studies/seed_groups.py groups them so."""

    def __init__(self, cfgs: list[RunConfig], sources: list[BatchSource]):
        outer_rng = torch.get_rng_state()
        self.cfgs = [bind_documents(c, s) for c, s in zip(cfgs, sources)]
        self.device = torch.device(device_type_for(self.cfgs[0]))
        self.precision = choose_precision(self.cfgs[0].train.precision, self.device.type)
        built = [_lone_model(c) for c in self.cfgs]
        self.models = [m for m, _ in built]  # the members alone, on the host: their first model scores them
        self.generators = [member_stream(state, c.seed, self.device) for (_, state), c in zip(built, self.cfgs)]
        self.feed = NoiseFeed(self.device)
        # The module vmap runs (its own tensors are replaced at every call). Its attention is the eager kernel,
        # the reference every kernel is tested against: SDPA's CPU kernel has no vmap batching rule, so
        # functorch would call it once per member and stack the results (8% of a quickstart group's step).
        # The lone runs keep their kernel; the two agree up to float rounding.
        self.template = _lone_model(dataclasses.replace(
            self.cfgs[0], model=dataclasses.replace(self.cfgs[0].model, attention="eager")))[0]
        torch.set_rng_state(outer_rng)  # the caller's stream is left as it was
        swap_dropout(self.template, self.feed)
        params, buffers = stack_module_state(self.models)
        self.names = list(params)

        def member_loss(p, b, noise, x_BT, y_BT, *data_pos_BT):
            self.feed.load(noise)
            kwargs = {"data_pos_BT": data_pos_BT[0]} if data_pos_BT else {}  # a task's own position ids
            return functional_call(self.template, (p, b), (x_BT, y_BT), kwargs).loss

        # randomness="error": a random draw inside the forward (a randomized PE) cannot be given each member's
        # own stream here, so it stops the probe and the group trains separately
        self.member_losses = torch.vmap(member_loss, randomness="error")
        self.keys = [pe_key(c) for c in self.cfgs]
        if len(set(self.keys)) > 1:  # on the host, before any device memory is spent
            self._check_members_stack(params, buffers, sources)
        self.template.to(self.device).train()
        self.params = {name: p.detach().to(self.device).requires_grad_() for name, p in params.items()}
        self.buffers = {name: b.to(self.device) for name, b in buffers.items()}
        self.rows = DeviceRows(sources, self.device)
        self.scorers: dict[str, torch.nn.Module] = {}  # per PE key: the model members are copied into to score

    def _check_members_stack(self, params, buffers, sources) -> None:
        """MembersDiffer unless the shared module, given member m's tensors, has member m's own loss on the
        first batch (eval mode, no dropout), for every member."""
        batch = DeviceRows(sources, torch.device("cpu")).batch(micro_indices(0, 0, self.cfgs[0].train.micro_batch,
                                                                             1, 0, 1))
        self.template.eval()
        with torch.no_grad():
            shared_M = self.member_losses(params, buffers, [], *batch)
            for m, model in enumerate(self.models):
                kwargs = {"data_pos_BT": batch[2][m]} if len(batch) > 2 else {}
                own = model.eval()(batch[0][m], batch[1][m], **kwargs).loss.item()
                model.train()
                if not math.isclose(shared_M[m].item(), own, rel_tol=STACK_RTOL):
                    raise MembersDiffer(f"{self.cfgs[m].train.run_name}'s PE options do not stack with "
                                        f"{self.cfgs[0].train.run_name}'s (loss {own:.6g} alone, "
                                        f"{shared_M[m].item():.6g} in the shared module)")

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
        """Each member's rows at the lone run's indices, on the device: (x_MBT, y_MBT), then the data's position
        ids (M, B, T) when the task defines them (`targets.positions_of`)."""
        return self.rows.batch(micro_indices(step, micro, self.cfgs[0].train.micro_batch, accum, 0, 1))

    def load_member(self, m: int) -> torch.nn.Module:
        """Member m's current weights (and buffers, should a forward have updated any) copied into a model of
        its PE on the device, returned in eval mode: one model per PE key (the first member's alone model, its
        kernels the lone run's), reused by every member of that key in turn."""
        key = self.keys[m]
        model = self.scorers.get(key)
        if model is None:
            model = self.scorers[key] = self.models[self.keys.index(key)].to(self.device)
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
    plan = make_plan(cfg, 1, group.device.type, stats_of(group.models[0], cfg.model))
    optimizer = group.optimizer()
    M, gbt = len(cfgs), cfg.train.global_batch_tokens
    step_fn = make_step(group, plan.accum, cfg.train.grad_clip if cfg.train.grad_clip > 0 else float("inf"))
    print(f"batched: {M} members on {group.device.type}, {step_fn.note}", flush=True)
    rows: list[list[dict]] = [[] for _ in range(M)]
    step, tokens = 0, 0
    while tokens < plan.end_tokens:
        set_lr(optimizer, plan.schedule.lr(tokens))
        loss_M, norm_M = step_fn(step)
        if not bool(torch.isfinite(loss_M).all() & torch.isfinite(norm_M).all()):  # one host sync per step
            bad = [names[m] for m in range(M) if not (math.isfinite(loss_M[m]) and math.isfinite(norm_M[m]))]
            raise NonFiniteError(f"non-finite loss or gradient at step {step} in {', '.join(bad)} (batched with "
                                 f"{', '.join(names)}); stopped before the optimizer step. Lower optim.lr or "
                                 f"check the data.")
        optimizer.step()
        step_fn.after_update(optimizer)
        log_now = (step + 1) % cfg.train.log_interval == 0 or tokens + gbt >= plan.end_tokens
        step, tokens = step + 1, tokens + gbt
        if log_now:
            for m, loss in enumerate(loss_M.tolist()):
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
