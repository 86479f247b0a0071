"""Exact match per operand digit count (the arithmetic tasks' `info["digits"]`, a cell's `exact_by_digits`): the
length-generalization figure of the arithmetic papers (McLeish et al. 2024, Cho et al. 2024), as a table of
means with CIs over seeds; `study_plots.exact_vs_digits` draws the same groups against digit count.

Exact match: greedy decoding after the prompt writes the whole answer (`task_accuracy.generated_exact`: the KV
cache, the task's position ids fed as in training). A count a cell could not score (positions its PE cannot
represent) is n/a, never 0."""

from __future__ import annotations

from collections import defaultdict

from posbench.stats import interval
from posbench.studies.cell_result import CellResult


def digit_groups(results: list[CellResult]) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(task, PE) -> digit count -> one exact-match share per seed ."""
    out: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        for digits, exact in r.exact_by_digits.items():
            out[(r.task, r.pe)][digits].append(exact)
    return out


def trained_digits(results: list[CellResult], task: str) -> int | None:
    """The longest in-distribution digit count of `task`, from the cells' ID split (`id_digits`)."""
    return max((r.id_digits or 0 for r in results if r.task == task), default=None) or None


def exact_by_digits_table(results: list[CellResult], confidence: float, n_boot: int) -> str:
    """Markdown: one row per (task, PE), one column per digit count, mean exact match % [CI] over seeds."""
    groups = digit_groups(results)
    if not groups:
        return ""
    lines = []
    for task in dict.fromkeys(t for t, _ in groups):
        counts = sorted({d for (t, _), by in groups.items() if t == task for d in by})
        trained = trained_digits(results, task)
        heads = [f"{d}*" if trained is not None and d > trained else str(d) for d in counts]
        lines += [f"**{task}** (digits per operand; * = longer than any training operand)", "",
                  "| PE | " + " | ".join(heads) + " |", "|---|" + "---|" * len(counts)]
        for (t, pe), by in groups.items():
            if t == task:
                cells = [interval(by.get(d, []), confidence, n_boot=n_boot, bounds=(0.0, 1.0)).fmt() for d in counts]
                lines.append(f"| {pe} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def beyond_groups(trained: int, longest: int) -> list[tuple[int, int]]:
    """Digit-count groups past training, for the by-step table: the first untrained count, then up to 1.5x and 2x
    the longest trained count, then the rest up to the longest tested (empty groups dropped), e.g. trained 10,
    tested to 30: 11, 12-15, 16-20, 21-30."""
    starts = sorted({trained + 1, trained + 2, int(1.5 * trained) + 1, 2 * trained + 1, longest + 1})
    starts = [s for s in starts if s <= longest + 1]
    return [(lo, nxt - 1) for lo, nxt in zip(starts, starts[1:])]


def beyond_by_step(results: list[CellResult], task: str) -> tuple[
        list[tuple[int, int]], dict[tuple[str, tuple[int, int]], dict[int, list[float]]]]:
    """The task's longest trained digit count and its groups of untrained counts (`beyond_groups`), and (PE,
    group) -> training step -> one exact-match share per seed: the mean over the group's counts of each
    learning-curve snapshot's `exact_by_digits`. The trained count first: a far end
    that does not move while it is still learning the trained lengths is short of training, not of extrapolation."""
    trained = trained_digits(results, task)
    snapshots = [(r.pe, p.step, p.exact_by_digits)
                 for r in results if r.task == task for p in r.curve if p.exact_by_digits]
    longest = max((d for _, _, by in snapshots for d in by), default=None)
    if trained is None or longest is None or longest <= trained:
        return [], {}
    groups = [(trained, trained), *beyond_groups(trained, longest)]
    out: dict[tuple[str, tuple[int, int]], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for pe, step, by in snapshots:
        for lo, hi in groups:
            counts = [by[d] for d in range(lo, hi + 1) if d in by]
            if counts:
                out[(pe, (lo, hi))][step].append(sum(counts) / len(counts))
    return groups, out


def beyond_curve_table(results: list[CellResult], confidence: float, n_boot: int) -> str:
    """Markdown: per task, exact match % [CI] over seeds at the longest trained digit count and on each group of
    untrained counts (the longest tested among them) after each learning-curve checkpoint: does more training
    move the far end, or has it stopped (the question behind a result short of a paper's)."""
    lines = []
    for task in dict.fromkeys(r.task for r in results):
        groups, by = beyond_by_step(results, task)
        if not by:
            continue
        steps = sorted({s for per in by.values() for s in per})
        lines += [f"**{task}** (digits per operand: the longest trained, {groups[0][0]}, then groups past it; mean "
                  "of the group's counts per seed)", "",
                  "| PE | digits | " + " | ".join(str(s) for s in steps) + " |", "|---|---|" + "---|" * len(steps)]
        for (pe, (lo, hi)), per in by.items():
            cells = [interval(per.get(s, []), confidence, n_boot=n_boot, bounds=(0.0, 1.0)).fmt() for s in steps]
            lines.append(f"| {pe} | {lo if lo == hi else f'{lo}-{hi}'} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
