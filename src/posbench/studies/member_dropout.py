"""Dropout for a group of models trained together under `torch.vmap` (studies/batched_train.py), each member
drawing exactly the masks it would draw training alone.

Alone, `nn.Dropout` on CPU computes `x * empty_like(x).bernoulli_(1 - p).div_(1 - p)` from the global
generator (ATen's `_dropout_impl`; p == 0 draws nothing). Under vmap one call would draw one mask for all
members from one stream, so instead each member keeps its own generator (seeded as its lone run's global
generator after its model was built) and `NoiseFeed.draw` makes every member's masks for one step, in the
order the forward asks for them, before the vmapped forward runs; the forward then only multiplies. The
order and shapes are recorded once by a forward in `record` mode (`NoiseFeed.record`).
"""

from __future__ import annotations

import torch
from torch import nn


class NoiseFeed:
    """The masks of one step, consumed in call order by the group's `MemberDropout` modules."""

    def __init__(self):
        self.calls: list[tuple[float, tuple[int, ...]]] | None = None  # (p, member shape) per call, in order
        self._queue: list[torch.Tensor] = []
        self._recording = False

    def record(self) -> None:
        """The next forward records its dropout calls instead of applying them (the probe's forward)."""
        self.calls, self._recording = [], True

    def stop_recording(self) -> None:
        self._recording = False

    def draw(self, generators: list[torch.Generator]) -> list[torch.Tensor]:
        """Per recorded call, the (members, *shape) noise: member m's masks from generators[m], in the order
        its lone run draws them (each generator sees only its own member's draws, so the order between
        members does not matter). Each member's slice is contiguous, as the lone run's `empty_like` of its
        contiguous activation, so `bernoulli_` fills it with the same values."""
        noise = [torch.empty(len(generators), *shape) for _, shape in self.calls]
        for m, g in enumerate(generators):
            for (p, _), n in zip(self.calls, noise):
                n[m].bernoulli_(1 - p, generator=g)
        for (p, _), n in zip(self.calls, noise):
            n.div_(1 - p)
        return noise

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
        return x * self.feed.next(x, self.p)


def swap_dropout(model: nn.Module, feed: NoiseFeed) -> int:
    """Replace every `nn.Dropout` of `model` (in place) by a `MemberDropout` on `feed`; returns how many."""
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is nn.Dropout]
    for parent, name, child in swaps:
        setattr(parent, name, MemberDropout(child.p, feed))
    return len(swaps)
