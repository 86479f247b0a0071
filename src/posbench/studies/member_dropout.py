"""Dropout for a group of models trained together under `torch.vmap` (studies/batched_train.py), each member
drawing exactly the masks it would draw training alone.

Alone, `nn.Dropout` on CPU computes `x * empty_like(x).bernoulli_(1 - p).div_(1 - p)` from the global
generator (ATen's `_dropout_impl`; p == 0 draws nothing). Under vmap one call would draw one mask for all
members from one stream, so instead each member keeps its own generator (seeded as its lone run's global
generator after its model was built) and `NoiseFeed.draw` makes every member's masks for one step, in the
order the forward asks for them, before the vmapped forward runs; the forward then only multiplies. The
order and shapes are recorded once by a forward in `record` mode (`NoiseFeed.record`).

On CUDA a lone run's dropout is a fused kernel whose masks no other call reproduces, so there a member draws its
masks with `bernoulli_` from a CUDA generator seeded with its own seed (`member_stream`): the same distribution as
alone and a function of the member's seed only (not of which members share its group), but not its lone run's
masks. Everything else of a member is its lone run up to float rounding on either device.
"""

from __future__ import annotations

import torch
from torch import nn


class NoiseFeed:
    """The masks of one step, consumed in call order by the group's `MemberDropout` modules."""

    def __init__(self, device: torch.device | None = None):
        self.device = device or torch.device("cpu")
        self.calls: list[tuple[float, tuple[int, ...]]] | None = None  # (p, member shape) per call, in order
        self._queue: list[torch.Tensor] = []
        self._recording = False

    def record(self) -> None:
        """The next forward records its dropout calls instead of applying them (the probe's forward)."""
        self.calls, self._recording = [], True

    def stop_recording(self) -> None:
        self._recording = False

    def draw(self, generators: list[torch.Generator], out: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """Per recorded call, the (members, *shape) noise: member m's masks from generators[m], in the order
        its lone run draws them (each generator sees only its own member's draws, so the order between
        members does not matter). Each member's slice is contiguous, as the lone run's `empty_like` of its
        contiguous activation, so `bernoulli_` fills it with the same values. `out`: tensors of `empty`'s shapes
        to fill in place (a captured step's static inputs)."""
        noise = out if out is not None else self.empty(len(generators))
        for m, g in enumerate(generators):
            for (p, _), n in zip(self.calls, noise):
                n[m].bernoulli_(1 - p, generator=g)
        for (p, _), n in zip(self.calls, noise):
            n.div_(1 - p)
        return noise

    def empty(self, members: int) -> list[torch.Tensor]:
        """Uninitialised (members, *shape) tensors on the feed's device, one per recorded call."""
        return [torch.empty(members, *shape, device=self.device) for _, shape in self.calls]

    def ones(self, members: int) -> list[torch.Tensor]:
        """Masks that drop nothing: a warm-up forward that must not move any member's generator."""
        return [torch.ones(members, *shape, device=self.device) for _, shape in self.calls]

    def load(self, noise: list[torch.Tensor]) -> None:
        """Inside the vmapped function: this member's (batched) masks for the forward about to run."""
        self._queue = list(noise)

    def next(self, x: torch.Tensor, p: float) -> torch.Tensor:
        if self._recording:
            self.calls.append((p, tuple(x.shape)))
            return torch.ones_like(x)
        return self._queue.pop(0)


class MemberDropout(nn.Module):
    """Stands in for `nn.Dropout(p)` in the group's template model; identity in eval mode and at p == 0, as
    nn.Dropout (which then draws nothing)."""

    def __init__(self, p: float, feed: NoiseFeed):
        super().__init__()
        self.p, self.feed = p, feed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return x * self.feed.next(x, self.p).to(x.dtype)  # as nn.Dropout, in the activation's dtype


def swap_dropout(model: nn.Module, feed: NoiseFeed) -> int:
    """Replace every `nn.Dropout` of `model` (in place) by a `MemberDropout` on `feed`; returns how many."""
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is nn.Dropout]
    for parent, name, child in swaps:
        setattr(parent, name, MemberDropout(child.p, feed))
    return len(swaps)


def _cpu_stream(state: torch.Tensor, seed: int, device: torch.device) -> torch.Generator:
    g = torch.Generator()
    g.set_state(state)  # where the lone run's global generator stands after its build: its very masks
    return g


def _cuda_stream(state: torch.Tensor, seed: int, device: torch.device) -> torch.Generator:
    g = torch.Generator(device)
    g.manual_seed(seed)  # the member's own stream (the lone run's fused-kernel masks cannot be reproduced)
    return g


MEMBER_STREAMS = {"cpu": _cpu_stream, "cuda": _cuda_stream}


def member_stream(cpu_state: torch.Tensor, seed: int, device: torch.device) -> torch.Generator:
    """Member's dropout generator on `device`: on CPU its lone run's stream, on CUDA one of its seed's own."""
    return MEMBER_STREAMS[device.type](cpu_state, seed, device)
