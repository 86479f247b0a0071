"""A finished cell's result, as every reader takes it: the study runner (resume, `--report-only`, the report),
scripts/compare_studies.py and the app all read cells through `loads_cell` / `problem_of`.

A cell's result is a JSON object with the keys every report reads (`CELL_KEYS`) and its values: each number in it,
at any depth, is None (n/a) or a finite real number (stats.value_problem, the one rule), and a metric is never text
or a bool. A value that breaks the rule is refused where the cell is read, naming the file and the key, so it never
reaches a judge: a NaN made reports print `nan [no interval]` and judge pairs on it, a string was a TypeError.
Cell files are written atomically, so a cell that fails here was damaged or edited by hand.
"""

from __future__ import annotations

import json

from posbench.errors import DataError
from posbench.stats import value_problem
from posbench.studies.study_spec import CLAIM_METRICS

CELL_KEYS = ("cell_id", "task", "pe", "seed", "axes")  # what every report reads of a cell result
TEXT_KEYS = ("cell_id", "task", "pe")
# the numbers reports, plots and judges read at the top of a cell and in each learning-curve point
METRIC_KEYS = (*CLAIM_METRICS, "chance", "id_generated_exact", "ood_generated_exact")
CURVE_KEYS = ("id_acc", "ood_acc", "ood_beyond_acc")


def _bad_number(value, path: str) -> str | None:
    """The first number under `value` (dicts and lists walked) that is not finite, as "path is nan, ..."."""
    if isinstance(value, float):
        problem = value_problem(value)
        return None if problem is None else f"{path} is {problem}"
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((p for key, v in items if (p := _bad_number(v, key)) is not None), None)


def problem_of(data, cell_id: str | None = None) -> str | None:
    """Why `data` is not a finished cell's result (None when it is): not an object, a key missing or of the wrong
    type, a metric that is not None or a finite number, a non-finite number anywhere, or another cell's id."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not a cell's result object"
    missing = [k for k in CELL_KEYS if k not in data]
    if missing:
        return f"no {', '.join(missing)}"
    for key in TEXT_KEYS:
        if not isinstance(data[key], str):
            return f"{key} is {value_problem(data[key]) or data[key]}, not text"
    if type(data["seed"]) is not int:
        return f"seed is {data['seed']!r}, not an integer"
    if not isinstance(data["axes"], dict):
        return "axes is not an object"
    if cell_id is not None and data["cell_id"] != cell_id:
        return f"holds cell {data['cell_id']!r}, not {cell_id!r}"
    curve = data.get("curve", [])
    if not isinstance(curve, list) or not all(isinstance(point, dict) for point in curve):
        return "curve is not a list of objects"
    named = [(k, data.get(k)) for k in METRIC_KEYS]
    named += [(f"curve[{i}].{k}", point.get(k)) for i, point in enumerate(curve) for k in CURVE_KEYS]
    for key, value in named:
        problem = value_problem(value)
        if problem is not None:
            return f"{key} is {problem}"
    return _bad_number(data, "")


def cell_problem(text: str, cell_id: str | None = None) -> str | None:
    """Why `text` (a cell file's contents) is not a finished cell's result, or None when it is one."""
    try:
        data = json.loads(text)
    except ValueError as e:
        return f"not JSON ({e})"
    return problem_of(data, cell_id)


def loads_cell(text: str, where: str, cell_id: str | None = None) -> dict:
    """A cell's result from its file's contents; DataError naming `where` (the file) and what is wrong."""
    problem = cell_problem(text, cell_id)
    if problem is not None:
        raise DataError(f"{where}: {problem}; a cell's values are numbers or null (n/a). Move the file aside and "
                        "run the study again to redo that cell")
    return json.loads(text)
