"""Sample order as a pure function of (seed, global sample index): a keyed permutation per epoch.

    window_ids(g, n, seed):  g = global sample indices (any shape) -> window ids in [0, n)
        epoch = g // n;  window = P_{seed, epoch}(g % n)

P is a bijection of [0, n) that needs no stored table (a 100B-token corpus has ~10^8 windows): a
6-round balanced Feistel network on the smallest even bit width covering n, with cycle-walking to
map back into [0, n) (Black & Rogaway 2002, "Ciphers with Arbitrary Finite Domains", sec. 4). So
the batch at any step is known without replaying the ones before it: resume from a cursor is exact,
and the order does not depend on world size or worker count. Callers should ask for many indices
at once (the loader asks for 64 batches' worth): numpy's per-call overhead dominates small requests.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

ROUNDS = 6
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fast, well-mixed 64-bit hash (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * _C1
    x = (x ^ (x >> np.uint64(27))) * _C2
    return x ^ (x >> np.uint64(31))


def _mix_int(x: int) -> int:
    return int(_mix(np.array([x & _M64], dtype=np.uint64))[0])


class Permutation:
    """A keyed bijection of [0, n)."""

    def __init__(self, n: int, key: int):
        if n <= 0:
            raise ValueError(f"cannot permute an empty range (n={n})")
        bits = max(2, (n - 1).bit_length())
        bits += bits % 2
        self.n = n
        self.half = np.uint64(bits // 2)
        self.mask = np.uint64((1 << (bits // 2)) - 1)
        self.keys = [np.uint64(_mix_int(key * ROUNDS + r + _GOLDEN)) for r in range(ROUNDS)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self.half, x & self.mask
        for k in self.keys:
            left, right = right, left ^ (_mix(right ^ k) & self.mask)
        return (left << self.half) | right

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        y = self._encrypt(np.asarray(idx, dtype=np.uint64))
        out = y >= self.n
        while out.any():  # cycle-walk: at most a few steps, the domain is < 4n
            y[out] = self._encrypt(y[out])
            out = y >= self.n
        return y.astype(np.int64)


def epoch_key(seed: int, epoch: int) -> int:
    return _mix_int(_mix_int(seed) ^ (epoch + 1) * _GOLDEN)


@lru_cache(maxsize=8)
def _permutation(n: int, seed: int, epoch: int) -> Permutation:
    return Permutation(n, epoch_key(seed, epoch))


def window_ids(g: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Window id for each global sample index in `g`; a pure function of (seed, g, n)."""
    g = np.asarray(g, dtype=np.int64)
    if g.size and g.min() < 0:
        raise ValueError("global sample indices must be >= 0")
    epochs, pos = np.divmod(g, n)
    out = np.empty_like(g)
    for epoch in np.unique(epochs):  # a batch spans one epoch, or two at a boundary
        sel = epochs == epoch
        out[sel] = _permutation(n, seed, int(epoch))(pos[sel])
    return out
