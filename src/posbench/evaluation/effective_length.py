"""Effective context length (RULER, Hsieh et al. 2024, arXiv 2404.06654, section 4: the longest length at
which a model's score stays above a threshold), made relative so it means something for small models:

    in-distribution score  s_ID = the score at the longest tested length <= the training length
    a length L passes      s_L >= keep x s_ID  and  s_L > baseline_L   (chance / commonest answer at L)
    effective length       the longest tested L >= the ID length such that it and every tested length
                           between the ID length and it pass ("stays": a dip ends it)

RULER's threshold is absolute (Llama-2-7B's 85.6% at 4K); a 128-token model's in-distribution score may be
40%, so the threshold here is a stated fraction `keep` of the model's own ID score. n/a, with the reason: no
tested length inside the training length, the ID cell n/a, or an ID score not above the baseline (nothing to
keep). The walk stops at the first n/a length (a PE that cannot represent it) and says so in `limit`; when
every tested length passes, `limit` says the true effective length may be longer than the longest tested.
"""

from __future__ import annotations


def effective_length(scores: dict[int, float | None], baselines: dict[int, float | None], train_len: int,
                     keep: float, na: dict[int, str] | None = None) -> dict:
    """{"length", "id_length", "id_score", "threshold", "na", "limit"} for one score-by-length table;
    `na[L]` is why L's score is None where known."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep={keep} must be in (0, 1]")
    na = na or {}
    out = {"length": None, "id_length": None, "id_score": None, "threshold": None, "na": None, "limit": None}
    lengths = sorted(scores)
    inside = [L for L in lengths if L <= train_len]
    if not inside:
        out["na"] = f"no tested length within the training length ({train_len})"
        return out
    L0 = out["id_length"] = inside[-1]
    s0 = scores[L0]
    if s0 is None:
        out["na"] = f"the in-distribution cell ({L0} tokens) is n/a" + (f": {na[L0]}" if L0 in na else "")
        return out
    out["id_score"], out["threshold"] = s0, keep * s0
    base0 = baselines.get(L0) or 0.0
    if s0 <= base0:
        out["na"] = f"the in-distribution score {s0:.1%} is not above the baseline {base0:.1%}"
        return out
    best = L0
    for L in [L for L in lengths if L > L0]:
        s, base = scores[L], baselines.get(L) or 0.0
        if s is None:
            out["limit"] = f"{L} tokens is n/a" + (f": {na[L]}" if L in na else "")
            break
        if s < keep * s0 or s <= base:
            out["limit"] = f"{L} tokens scores {s:.1%} (threshold {keep * s0:.1%}, baseline {base:.1%})"
            break
        best = L
    else:
        out["limit"] = "passes at every tested length: the effective length may be longer"
    out["length"] = best
    return out
