"""Markdown pieces the suites' reports share: numbers and percentages with "n/a" for cells a PE cannot
represent, tables, and the short reason such a cell names."""

from __future__ import annotations


def fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def short_reason(err: Exception) -> str:
    """The first sentence of a PositionRangeError: what the table holds, not the advice."""
    return str(err).split(". ")[0]
