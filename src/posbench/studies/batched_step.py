"""One optimizer step's forward, backward and per-member clipping of a batched group (studies/batched_train.py),
as plain calls (`EagerStep`) or replayed from a CUDA graph (`GraphedStep`). A study model (d_model 64-128) is
launch-bound on a GPU: a step is hundreds of small kernels whose launches cost more than their math, and a graph
replays all of them with one launch. Both compute the same operations on the same tensors; the graph is chosen
by the group's device (`STEP_KINDS`), and a group whose step cannot be captured runs eagerly and says why.

Shape legend: M members.
"""

from __future__ import annotations

import contextlib

import torch

AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16}  # fp16 does not batch (batched_train.UNBATCHED_SETTINGS)
WARMUP_STEPS = 3  # eager forward-backward passes on a side stream before capture, as torch.cuda.graphs asks


def autocast(group, cache_enabled: bool = True):
    """The lone run's autocast (training/device.py's precision) for the group's device; a captured step needs
    the weight cache off (torch.cuda.graphs)."""
    dtype = AUTOCAST_DTYPES[group.precision.name]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(group.device.type, dtype=dtype, cache_enabled=cache_enabled)


class EagerStep:
    """Each micro-batch's vmapped forward and backward, accumulated, then `clip_grad_norm_` per member."""

    def __init__(self, group, accum: int, clip: float):
        self.group, self.accum, self.clip = group, accum, clip
        self.note = "eager step"

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean loss_M, gradient norm_M before clipping) of `step`; the members' gradients are left clipped."""
        g = self.group
        loss_sum_M = torch.zeros(len(g.cfgs), device=g.device)
        for micro in range(self.accum):
            batch = g.batch(step, micro, self.accum)
            noise = g.feed.draw(g.generators)
            with autocast(g):
                loss_M = g.member_losses(g.params, g.buffers, noise, *batch)
            (loss_M / self.accum).sum().backward()  # members share no parameter: each gets its own gradient
            loss_sum_M += loss_M.detach() / self.accum
        return loss_sum_M, g.clip(self.clip)

    def after_update(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)


class GraphedStep:
    """The step's forward, backward and clipping captured once in a CUDA graph and replayed at every step: the
    batch and the dropout masks are copied into the graph's static inputs, the parameters are updated in place by
    the (eager) optimizer, and the gradients are the graph's outputs, overwritten by each replay (so they are
    never zeroed or freed between steps). One micro-batch per step (a study cell's plan)."""

    def __init__(self, group, accum: int, clip: float):
        if accum != 1:
            raise ValueError(f"{accum} micro-batches per step: the graph captures one")
        self.group, self.clip = group, clip
        g, M = group, len(group.cfgs)
        self.batch = [t.clone() for t in g.batch(0, 0, 1)]
        self.noise = g.feed.ones(M)  # warm-up masks: no member's generator moves before its first step
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self._forward_backward()
                for p in g.params.values():
                    p.grad = None
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss_M = self._forward_backward()
            self.norm_M = g.clip(clip)
        self.note = "step captured in a CUDA graph"

    def _forward_backward(self) -> torch.Tensor:
        g = self.group
        with autocast(g, cache_enabled=False):
            loss_M = g.member_losses(g.params, g.buffers, self.noise, *self.batch)
        loss_M.sum().backward()
        return loss_M.detach()

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.group
        for static, rows in zip(self.batch, g.batch(step, 0, 1)):
            static.copy_(rows)
        g.feed.draw(g.generators, out=self.noise)
        self.graph.replay()
        return self.loss_M, self.norm_M

    def after_update(self, optimizer: torch.optim.Optimizer) -> None:
        pass  # the next replay overwrites the gradients; freeing them would detach the graph's outputs


STEP_KINDS = {"cpu": EagerStep, "cuda": GraphedStep}


def make_step(group, accum: int, clip: float) -> EagerStep | GraphedStep:
    """The device's step; the eager one, with the reason printed, where a graph cannot be captured."""
    kind = STEP_KINDS.get(group.device.type, EagerStep)
    try:
        return kind(group, accum, clip)
    except Exception as e:  # noqa: BLE001 - any failure to capture means: run the same step eagerly
        for p in group.params.values():
            p.grad = None
        print(f"batched step not captured ({e.__class__.__name__}: {str(e).strip()[:200]}); running it eagerly",
              flush=True)
        return EagerStep(group, accum, clip)
