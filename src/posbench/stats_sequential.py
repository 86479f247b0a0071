"""Group-sequential boundaries: the level each look at the seeds may test at, so that looking after every seed round
and stopping when a verdict is reached keeps the chance of a wrong "differs" or a wrong "the same" over the whole
study at the nominal level (docs/statistics.md, "Sequential seeds").

A sequential study looks at n_1 < n_2 < ... < n_K seeds (its `start`, `start + step`, ..., `max`). Testing at the
fixed level at every look and stopping at the first verdict is optional stopping: with looks at 3..10 seeds a null
pair is called different far more often than 5% (scripts/calibrate_stats.py measures it). Instead the level is
*spent* over the looks (Lan & DeMets 1983): a spending function f(t) of the information fraction t = n_k / n_K,
f(1) = alpha, says how much of the one-sided level may be used up by look k, and look k tests at the nominal level
c_k whose rejections, among the studies not stopped before it, use exactly f(t_k) - f(t_{k-1}).

The c_k are calibrated by simulation of the very test the judges run: Student t on the paired per-seed differences,
with normal differences under the null (where the fixed t test is exact, so the boundary is exact there up to
simulation error), a fixed generator (identical looks give identical boundaries) and `DRAWS` simulated studies. The
same nominal levels then serve every other shape, as the fixed t test's level does; the calibration measures how
they hold on skewed, bounded and collapsing values. A decision at look k is read through `scaled`: its p-value times
alpha / c_k, compared with alpha as a fixed test's would be, so Holm over a family and the three-valued
`Decision.state` apply unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps

DRAWS = 200_000  # simulated null studies per boundary: one SE of the spent level is 0.03% at 2.5%


@dataclass(frozen=True)
class Spending:
    """An alpha-spending function: f(t, alpha) -> the one-sided level used up by information fraction t."""

    name: str  # as reports print it
    fn: object  # (t: float, alpha: float) -> float, increasing, f(1, alpha) = alpha

    def spent(self, t: float, alpha: float) -> float:
        return min(alpha, max(0.0, float(self.fn(t, alpha))))


def _obrien_fleming(t: float, alpha: float) -> float:
    # Lan & DeMets 1983, eq. (2): 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), one-sided total alpha. Spends little early.
    return 2.0 * sps.norm.sf(sps.norm.isf(alpha / 2) / math.sqrt(t))


def _pocock(t: float, alpha: float) -> float:
    # Lan & DeMets 1983, Pocock-like: alpha ln(1 + (e - 1) t). Spends evenly, so early looks can decide.
    return alpha * math.log(1 + (math.e - 1) * t)


SPENDING: dict[str, Spending] = {
    "pocock": Spending("Lan-DeMets Pocock-type spending", _pocock),
    "obrien_fleming": Spending("Lan-DeMets O'Brien-Fleming-type spending", _obrien_fleming),
}
DEFAULT_SPENDING = "obrien_fleming"


@lru_cache(maxsize=8)
def _null_t(looks: tuple[int, ...]) -> np.ndarray:
    """t statistics (DRAWS, looks) of "the mean is above 0" at each look of the same simulated null studies (normal
    differences, a fixed generator): one draw of every seed, running sums give each look's mean and spread."""
    rng = np.random.default_rng(20261201)  # fixed: the boundary is a function of its arguments
    x = rng.standard_normal((DRAWS, looks[-1]))
    s1, s2 = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
    n = np.asarray(looks, dtype=np.float64)
    mean = s1[:, n.astype(int) - 1] / n
    var = (s2[:, n.astype(int) - 1] - n * mean * mean) / (n - 1)
    return mean / np.sqrt(var / n)


@lru_cache(maxsize=64)
def nominal_levels(looks: tuple[int, ...], alpha: float, spending: str = DEFAULT_SPENDING) -> tuple[float, ...]:
    """The one-sided nominal level c_k of each look (seed counts `looks`, increasing), for a one-sided total level
    `alpha` under `spending`: a one-sided t test at look k rejects when its p < c_k. One look is the fixed test
    (c_1 = alpha)."""
    if len(looks) == 1:
        return (alpha,)
    spend = SPENDING[spending]
    t = _null_t(looks)
    alive = np.ones(DRAWS, bool)
    levels, used = [], 0.0
    for k, n in enumerate(looks):
        target = spend.spent(n / looks[-1], alpha) - used  # level this look may use, as a share of all draws
        reject = int(round(target * DRAWS))  # the `reject` largest t's among the studies still running
        t_alive = t[alive, k]
        if reject <= 0:
            cut = float(t_alive.max()) + 1.0 if t_alive.size else np.inf  # spends nothing: above every simulated t
        elif reject >= t_alive.size:
            cut = -np.inf
        else:  # between the reject-th and (reject+1)-th largest: a p-value the simulated studies never hit
            top = np.partition(t_alive, t_alive.size - reject - 1)[t_alive.size - reject - 1:]
            cut = float((top[0] + np.min(top[1:])) / 2)
        levels.append(min(float(sps.t.sf(cut, n - 1)), alpha))  # never above the fixed test's level
        alive &= ~(t[:, k] > cut)
        used += target
    return tuple(levels)


@dataclass(frozen=True)
class Boundary:
    """The boundary of one sequential study: its looks, level and spending; `scaled` reads a look's p-values."""

    looks: tuple[int, ...]
    confidence: float = 0.95
    spending: str = DEFAULT_SPENDING

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    def two_sided(self, look: int) -> float:
        """Nominal two-sided level at look index `look` (a t test of "they differ", `>` shown or refuted)."""
        return 2 * nominal_levels(self.looks, self.alpha / 2, self.spending)[look]

    def one_sided(self, look: int) -> float:
        """Nominal level of each one-sided test of TOST ("the same") at look index `look`."""
        return nominal_levels(self.looks, self.alpha, self.spending)[look]

    def scaled(self, p: float | None, look: int, two_sided: bool = True) -> float | None:
        """`p` on the fixed test's scale: p * alpha / c_k (capped at 1), so `scaled < alpha` exactly when the
        look's test rejects. Holm over scaled p's is Holm at the look's level."""
        if p is None:
            return None
        level = self.two_sided(look) if two_sided else self.one_sided(look)
        return min(1.0, p * self.alpha / level) if level > 0 else 1.0

    def describe(self) -> str:
        """One line a report prints: which boundary, at which looks."""
        return (f"{SPENDING[self.spending].name} (Lan & DeMets 1983) over looks at "
                f"{', '.join(map(str, self.looks))} seeds, {100 * self.alpha:g}% in all")
