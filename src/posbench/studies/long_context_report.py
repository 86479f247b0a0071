"""The report section of a study with a length grid (studies/length_grid.py): exact match per family and length with
intervals over seeds, effective length per row with its interval, and whether each row keeps multi-key NIAH above
its question-blind baseline at twice the training length, judged as one family of claims (studies/claims.py).

Effective length is the long_context eval suite's (evaluation/effective_length.py): per seed, on the mean over
families of each length's score (a family's score at a length is its mean over depths), the longest tested length
that keeps `keep` x the in-distribution score and stays above the baseline; its interval is over seeds. A seed whose
in-distribution score is not above the baseline has no effective length (n/a, counted beside the interval).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from posbench.evaluation.effective_length import effective_length
from posbench.evaluation.suites.long_context import blind_pick
from posbench.stats import DEFAULT_METHOD, interval, interval_label
from posbench.studies.cell_result import CellResult
from posbench.studies.claims import ClaimConfig, check_claims, claims_markdown, family_note, rules_note

MEAN = "mean of families"
MULTIKEY = "niah_multikey"


def grid_results(results: list[CellResult]) -> list[CellResult]:
    return [r for r in results if r.length_grid is not None]


def family_scores(grid: dict, key: str = "exact") -> dict[str, dict[int, float | None]]:
    """family -> length -> mean of `key` over the family's depths (None when any depth is n/a), plus MEAN: the mean
    over families (None when any family is n/a)."""
    by: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for c in grid["cells"]:
        by[c["family"]][int(c["length"])].append(c.get(key))
    out = {f: {L: None if any(v is None for v in vs) else float(np.mean(vs)) for L, vs in sorted(ls.items())}
           for f, ls in by.items()}
    lengths = sorted({L for ls in out.values() for L in ls})
    out[MEAN] = {L: None if any(out[f].get(L) is None for f in by) else float(np.mean([out[f][L] for f in by]))
                 for L in lengths}
    return out


def per_row(results: list[CellResult], family: str, length: int, key: str = "exact") -> dict[str, dict[int, float]]:
    """{row: {seed: score}} of one family (or MEAN) at one length."""
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for r in grid_results(results):
        out[r.pe][r.seed] = family_scores(r.length_grid, key)[family].get(length)
    return dict(out)


def seed_effective(r: CellResult, keep: float, family: str = MEAN) -> dict:
    grid = r.length_grid
    scores, base = family_scores(grid)[family], family_scores(grid, "baseline")[family]
    return effective_length(scores, base, grid["train_len"], keep)


def _layout(results: list[CellResult]) -> tuple[list[str], list[str], list[int], int]:
    grids = grid_results(results)
    rows = list(dict.fromkeys(r.pe for r in grids))
    families = list(dict.fromkeys(c["family"] for r in grids for c in r.length_grid["cells"]))
    return rows, families, grids[0].length_grid["lengths"], grids[0].length_grid["train_len"]


def length_tables(results: list[CellResult], confidence: float, n_boot: int) -> str:
    """One table per family (and the mean over families): rows by length multiple, with the baselines."""
    rows, families, lengths, train_len = _layout(results)
    first = grid_results(results)[0].length_grid
    heads = [f"{L // train_len}x ({L})" for L in lengths]
    parts = []
    for fam in [*families, MEAN]:
        lines = [f"**{fam}**", "", "| row | " + " | ".join(heads) + " |", "|---|" + "---|" * len(lengths)]
        for row in rows:
            cells = [interval(list(per_row(results, fam, L)[row].values()), confidence, DEFAULT_METHOD, n_boot,
                              bounds=(0.0, 1.0)).fmt() for L in lengths]
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
        base = family_scores(first, "baseline")[fam]
        lines.append("| *baseline* | " + " | ".join("n/a" if base.get(L) is None else f"{100 * base[L]:.1f}"
                                                    for L in lengths) + " |")
        picks = family_scores(first, "guess")  # certain with one candidate: said as n/a (blind_pick)
        lines.append("| *question-blind pick* | " + " | ".join(_pick_cell(picks, fam, L, families)
                                                               for L in lengths) + " |")
        parts += lines + [""]
    return "\n".join(parts)


def _pick_cell(picks: dict, fam: str, L: int, families: list[str]) -> str:
    """A family's question-blind pick at L; for the mean over families, n/a when one family's is (a mean with a
    certain pick in it is no level to beat either)."""
    if fam == MEAN and any((picks[f].get(L) or 0.0) >= 1.0 for f in families):
        return "n/a (a family has one candidate in the context)"
    return blind_pick(picks[fam].get(L)).rstrip("%")


def effective_table(results: list[CellResult], keep: float, confidence: float, n_boot: int) -> str:
    rows, families, lengths, train_len = _layout(results)
    label = interval_label(DEFAULT_METHOD, confidence, len({r.seed for r in grid_results(results)}))
    lines = [f"| row | effective length, tokens [{label}] | per seed | n/a seeds | "
             + " | ".join(f"{f} (mean)" for f in families) + " |", "|---|---|---|---|" + "---|" * len(families)]
    for row in rows:
        mine = sorted((r for r in grid_results(results) if r.pe == row), key=lambda r: r.seed)
        effs = [seed_effective(r, keep)["length"] for r in mine]
        s = interval(effs, confidence, DEFAULT_METHOD, n_boot, bounds=(train_len, lengths[-1]))
        point = "n/a" if s.mean is None else f"{s.mean:.0f}" if s.n < 2 else \
            f"{s.mean:.0f} [no interval]" if s.lo is None else f"{s.mean:.0f} [{s.lo:.0f}, {s.hi:.0f}]"
        fams = []
        for fam in families:
            v = [seed_effective(r, keep, fam)["length"] for r in mine]
            v = [x for x in v if x is not None]
            fams.append(f"{np.mean(v):.0f} ({len(v)}/{len(mine)})" if v else "n/a")
        lines.append(f"| {row} | {point} | {', '.join('n/a' if e is None else str(e) for e in effs)} | "
                     f"{sum(e is None for e in effs)} | " + " | ".join(fams) + " |")
    return "\n".join(lines)


def multikey_claims(results: list[CellResult], confidence: float, n_boot: int, multiple: int = 2) -> str:
    """`row > guess` on multi-key NIAH exact match at `multiple` x the training length, for every row, as one Holm
    family; empty when the grid has no multi-key NIAH or no such length."""
    rows, families, lengths, train_len = _layout(results)
    length = multiple * train_len
    if MULTIKEY not in families or length not in lengths:
        return ""
    guess = family_scores(grid_results(results)[0].length_grid, "guess")[MULTIKEY][length]
    metric = f"{MULTIKEY} exact match at {multiple}x ({length} tokens)"
    by_row = per_row(results, MULTIKEY, length)
    jobs = [(ClaimConfig(order=f"{row} > {guess:g}", metric=metric), {f"{MULTIKEY} {multiple}x": by_row}, True,
             "pts") for row in rows]
    checks, size = check_claims(jobs, confidence, n_boot)
    first = per_row(results, MULTIKEY, train_len)
    lines = ["| row | 1x (training length) | " + f"{multiple}x |", "|---|---|---|"]
    for row in rows:
        cells = [interval(list(v[row].values()), confidence, DEFAULT_METHOD, n_boot, bounds=(0.0, 1.0)).fmt()
                 for v in (first, by_row)]
        lines.append(f"| {row} | {cells[0]} | {cells[1]} |")
    context = [f"{MULTIKEY} exact match %, guess {100 * guess:g}%. A row not above the guess at 1x has not learned the "
               "lookup in distribution, so its verdict at 2x says nothing about extrapolation.", "", *lines]
    return "\n".join([*context, "", rules_note(confidence), "", family_note(size, confidence), "",
                      claims_markdown(checks)])


def long_context_section(results: list[CellResult], keep: float, confidence: float, n_boot: int) -> list[str]:
    """The report's lines for the length grid; [] when no cell has one."""
    if not grid_results(results):
        return []
    _, _, lengths, train_len = _layout(results)
    pct = int(100 * confidence)
    parts = ["## Long-context families: exact match by length", "",
             f"Greedy decoding with the KV cache after each prompt, exact match of the whole answer, at "
             f"{', '.join(str(L) for L in lengths)} tokens ({train_len} = the training length); a family's score at a "
             f"length is its mean over depths. Mean % [{pct}% t-interval over seeds]; *baseline*: chance or the "
             "commonest answer, *question-blind pick*: a reader that picks one of the context's candidates "
             "without reading the question (n/a where the context holds one: the pick is then the retrieval itself).",
             "",
             length_tables(results, confidence, n_boot),
             "## Effective length per row", "",
             f"Per seed, on the mean over families: the longest tested length keeping {keep:.0%} of the "
             "in-distribution score and above the baseline (evaluation/effective_length.py); interval over seeds, "
             "clipped to the tested lengths; the longest tested length is a lower bound where every length passed. "
             "Per family: the mean over the seeds that have one (seeds with one / seeds).", "",
             effective_table(results, keep, confidence, n_boot), ""]
    claims = multikey_claims(results, confidence, n_boot)
    if claims:
        parts += ["## Multi-key NIAH above its question-blind baseline at 2x", "", claims, ""]
    return parts
