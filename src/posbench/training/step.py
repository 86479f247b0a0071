"""One optimizer step (`train_step`): the LR of the tokens seen, forward and backward over the step's micro-batches,
the gradient norms, one check that every rank's loss and gradients are finite (which also reads the stop flag),
and the update."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posbench import faults
from posbench.errors import ConfigError, NonFiniteError
from posbench.model.output import ModelOutput
from posbench.pe import PositionRangeError
from posbench.training import distributed as dist
from posbench.training.batch_sources import micro_indices, positions_on
from posbench.training.metrics import grad_norms_by_layer
from posbench.training.optim import set_lr
from posbench.training.start import Run


@dataclass
class StepOut:
    """What a step leaves for the end-of-step policies (training/end_of_step.py)."""

    loss_sum: torch.Tensor  # this rank's mean loss over the step's micro-batches, on the device
    grad_norm: torch.Tensor  # of the unclipped gradients, all ranks'
    out: ModelOutput  # the last micro-batch's output: its logit statistics for the log row
    layer_norms: dict[str, torch.Tensor]  # per-group gradient norms, on log steps only
    lr: float
    log_now: bool  # this step writes a log row
    stop_now: bool  # a rank was asked to stop (SIGTERM/SIGINT)


def train_step(run: Run) -> StepOut:
    """One optimizer step; NonFiniteError (exit code 3) before the update when any rank's loss or gradient is
    not finite, so no rank's weights take it."""
    state, train = run.state, run.cfg.train
    lr = run.plan.schedule.lr(state.tokens)
    set_lr(run.optimizer, lr)
    log_now = (state.step + 1) % train.log_interval == 0 or state.tokens + train.global_batch_tokens >= \
        run.plan.end_tokens
    loss_sum, out = _forward_backward(run, log_now)
    run.precision.unscale(run.optimizer)
    # per-group norms of the unclipped gradients, read here because clipping rescales them and
    # zero_grad frees them; collective under FSDP, so every rank computes them
    layer_norms = grad_norms_by_layer(run.model) if log_now else {}
    clip = train.grad_clip if train.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), clip)
    grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    # the loss is local to a rank, gradients are already all-reduced: a NaN loss names its source.
    # One host sync per step: the finite checks and the stop flag travel in one tensor.
    bad_loss, bad_grad, stop_now = dist.step_check(loss_sum, grad_norm, run.stop.raised)
    if bad_loss >= 0 or bad_grad >= 0:
        what, where = ("loss", bad_loss) if bad_loss >= 0 else ("gradient", bad_grad)
        raise NonFiniteError(f"non-finite {what} at step {state.step} on rank {where} (loss {loss_sum.item()}, "
                             f"grad norm {grad_norm.item()}); stopped before the optimizer step on all "
                             f"ranks. Lower optim.lr or check the data.")
    run.precision.step(run.optimizer)
    run.optimizer.zero_grad(set_to_none=True)
    state.step, state.tokens = state.step + 1, state.tokens + train.global_batch_tokens
    state.steps_this_run += 1
    return StepOut(loss_sum, grad_norm, out, layer_norms, lr, log_now, stop_now)


def _forward_backward(run: Run, log_now: bool) -> tuple[torch.Tensor, ModelOutput]:
    """Gradients of the step's micro-batches, accumulated (synchronised across ranks on the last one only);
    (this rank's mean loss, the last micro-batch's output)."""
    accum, micro_batch, step, rank = run.plan.accum, run.cfg.train.micro_batch, run.state.step, dist.rank()
    loss_sum = torch.zeros((), device=run.device)
    for micro in range(accum):
        rows = run.source.samples(micro_indices(step, micro, micro_batch, accum, rank, dist.world_size()))
        x, y = rows[0].to(run.device, non_blocking=True), rows[1].to(run.device, non_blocking=True)
        data_pos = positions_on(rows, run.device)
        sync = micro == accum - 1 or not hasattr(run.wrapped, "no_sync")
        with (torch.enable_grad() if sync else run.wrapped.no_sync()), run.precision.autocast():
            # the fused loss's logit moments cost passes over the logits: asked on log steps only
            try:
                out = run.step_fn(x, y, logit_moments=log_now, data_pos_BT=data_pos)
            except PositionRangeError as e:  # evaluation's "n/a" is training's config error (exit 2)
                raise ConfigError(e.training_advice()) from None
        # the PE's own objective, weighted by its config (SeqPE's), is minimised beside the LM loss
        objective = out.loss if out.aux_loss is None else out.loss + out.aux_loss
        loss = faults.inject("nan_loss", f"{step},{rank}", objective)  # tests: POSBENCH_INJECT_NAN=step,rank
        run.precision.backward(loss / accum)
        loss_sum += loss.detach() / accum
    return loss_sum, out
