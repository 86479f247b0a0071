"""A study row's key for a finished cell: (task, PE row label, axes as sorted text pairs).

Its own module so both the report (study_report.py) and the sequential looks (sequential.py), which the report
imports, read cells by the same key without importing each other.
"""

from __future__ import annotations


def group_key(r) -> tuple:
    """(task, pe, axes) of a cell result (studies/cell_result.CellResult): the row it belongs to."""
    return (r.task, r.pe, tuple(sorted((k, str(v)) for k, v in r.axes.items())))
