"""Exact match per operand digit count (the arithmetic tasks' `info["digits"]`, a cell's `exact_by_digits`): the
length-generalization figure of the arithmetic papers (McLeish et al. 2024, Cho et al. 2024), as a table of
means with CIs over seeds; `study_plots.exact_vs_digits` draws the same groups against digit count.

Exact match: greedy decoding after the prompt writes the whole answer (`task_accuracy.generated_exact`: the KV
cache, the task's position ids fed as in training). A count a cell could not score (positions its PE cannot
represent) is n/a, never 0."""

from __future__ import annotations

from collections import defaultdict

from posbench.stats import interval


def digit_groups(results) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(task, PE) -> digit count -> one exact-match share per seed (JSON turned the counts into strings)."""
    out: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        for digits, exact in (r.get("exact_by_digits") or {}).items():
            out[(r["task"], r["pe"])][int(digits)].append(exact)
    return out


def trained_digits(results, task: str) -> int | None:
    """The longest in-distribution digit count of `task`, from the cells' ID split (`id_digits`)."""
    return max((r.get("id_digits") or 0 for r in results if r["task"] == task), default=None) or None


def exact_by_digits_table(results: list[dict], confidence: float, n_boot: int) -> str:
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


def longest_by_step(results, task: str) -> tuple[int | None, dict[str, dict[int, list[float]]]]:
    """The longest digit count the task's cells were tested at, and PE -> training step -> one exact-match share
    per seed at that count (`exact_by_digits` of each learning-curve snapshot; JSON made the counts strings)."""
    snapshots = [(r["pe"], int(p["step"]), {int(d): v for d, v in p["exact_by_digits"].items()})
                 for r in results if r["task"] == task for p in r.get("curve") or [] if p.get("exact_by_digits")]
    longest = max((d for _, _, by in snapshots for d in by), default=None)
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for pe, step, by in snapshots:
        if longest in by:
            out[pe][step].append(by[longest])
    return longest, out


def longest_curve_table(results: list[dict], confidence: float, n_boot: int) -> str:
    """Markdown: per task, exact match % [CI] at the longest tested digit count after each curve checkpoint: does
    more training move the far end, or has it stopped (the question behind a result short of a paper's)."""
    lines = []
    for task in dict.fromkeys(r["task"] for r in results):
        longest, by_pe = longest_by_step(results, task)
        if longest is None or not by_pe:
            continue
        steps = sorted({s for by in by_pe.values() for s in by})
        lines += [f"**{task}** at {longest} digits per operand (the longest tested), by training step", "",
                  "| PE | " + " | ".join(str(s) for s in steps) + " |", "|---|" + "---|" * len(steps)]
        for pe, by in by_pe.items():
            cells = [interval(by.get(s, []), confidence, n_boot=n_boot, bounds=(0.0, 1.0)).fmt() for s in steps]
            lines.append(f"| {pe} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
