"""A finished cell's result as a typed record (`CellResult`), and the one place it is written and read: the cell
(studies/cell.py) builds it, the study runner writes it (`dumps_cell`) and every reader (resume, `--report-only`,
the report, plots, published results, scripts/compare_studies.py and the app) reads it through `parse_cell` /
`loads_cell` and then reads fields, never string keys. A renamed or misspelt field fails where it is written
(a TypeError building the dataclass) or read (an unknown field in a file is refused, naming it), not at report time.

The file carries its schema version (`"schema": SCHEMA`). Version 1 is every cell file and results.json written
before the version existed (no `schema` key): the same fields, each but the identity ones (`V1_REQUIRED`) optional,
since fields were added to cells over time (matmul, device, length_grid, spec, ...). `_from_v1` fills the absent ones
with their n/a value; a version-2 file holds every field but `dope_heads` (added with DoPE: n/a for it), a version-3
file every field, so a missing one is damage and is refused.

Values follow one rule (stats.value_problem): each number in a result, at any depth, is None (n/a) or a finite real
number, and a metric is never text or a bool. A value that breaks it is refused where the cell is read, naming the
key, so it never reaches a judge: a NaN made reports print `nan [no interval]` and judge pairs on it, a string was a
TypeError. Cell files are written atomically, so a cell that fails here was damaged or edited by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from posbench.errors import DataError
from posbench.stats import value_problem
from posbench.studies.study_spec import CLAIM_METRICS

SCHEMA = 3  # the version `dumps_cell` writes; `MIGRATIONS` lifts every older one to it


class CellProblem(ValueError):
    """Why some data is not a cell's result (the message names the field); `problem_of` returns it as text."""


@dataclass(frozen=True)
class CurvePoint:
    """One learning-curve snapshot: the accuracies at a training step (exact_by_digits: tasks with a length bin,
    per digit count)."""

    step: int
    id_acc: float | None = None
    ood_acc: float | None = None
    ood_beyond_acc: float | None = None
    exact_by_digits: dict[int, float] | None = None


@dataclass(frozen=True)
class Attention:
    """The final model's attention on the first ID example: its tokens and probs[layer][head][query][key]."""

    tokens: list[str]
    probs: list


@dataclass(frozen=True)
class CellResult:
    """A finished cell. Dicts keyed by a length or a digit count have int keys (JSON writes them as text; `parse_cell`
    turns them back)."""

    cell_id: str
    task: str
    pe: str  # the row's label
    seed: int
    axes: dict[str, Any]
    arch: str | None = None
    data_note: str | None = None
    device: str | None = None
    matmul: str | None = None  # the linear layers' library that ran (model.matmul)
    chance: float | None = None
    id_acc: float | None = None
    id_exact: float | None = None
    id_loss: float | None = None
    id_generated_exact: float | None = None  # greedy decoding's exact match: tasks with a length bin
    ood_acc: float | None = None
    ood_exact: float | None = None
    ood_loss: float | None = None
    ood_generated_exact: float | None = None
    ood_beyond_acc: float | None = None  # OOD targets past the training length: the headline metric
    ood_within_acc: float | None = None
    ood_by_position: list[float | None] | None = None
    gap: float | None = None
    curve: list[CurvePoint] = field(default_factory=list)
    train_loss: list[dict] = field(default_factory=list)  # metrics rows {step, loss}, as metrics.jsonl has them
    acc_by_length: dict[int, float] = field(default_factory=dict)
    exact_by_digits: dict[int, float] = field(default_factory=dict)
    id_digits: int | None = None  # the longest trained digit count (tasks with a length bin)
    attention: Attention | None = None  # None where left out (published results)
    length_grid: dict | None = None  # studies/length_grid.grid_result, when the study scores one
    seq_len: int | None = None
    ood_len: int | None = None
    params: int | None = None
    spec: dict | None = None  # the settings it was made with (cell_files.cell_spec), kept with the cell
    # an arm with DoPE (evaluation/dope.py): the heads its final model's scoring chose per split and grid length,
    # with every head's score; None for every other row
    dope_heads: list[dict] | None = None

    def metric(self, name: str) -> float | None:
        """A metric by its name in a study's spec (a claim's `metric`, a report's column): one of METRIC_FIELDS."""
        if name not in METRIC_FIELDS:
            raise KeyError(f"{name!r} is not a cell metric; one of {', '.join(METRIC_FIELDS)}")
        return getattr(self, name)

    def to_data(self) -> dict:
        """The JSON object of this result, with its schema version."""
        return {"schema": SCHEMA, **asdict(self)}


# the numbers reports, plots and judges read at the top of a cell and in each learning-curve point
METRIC_FIELDS = (*CLAIM_METRICS, "chance", "id_generated_exact", "ood_generated_exact")
CURVE_METRICS = ("id_acc", "ood_acc", "ood_beyond_acc")
TEXT_FIELDS = ("cell_id", "task", "pe")
V1_REQUIRED = ("cell_id", "task", "pe", "seed", "axes")  # what a cell has held since the first study
FIELDS = tuple(f.name for f in fields(CellResult))
POINT_FIELDS = tuple(f.name for f in fields(CurvePoint))
# the fields that hold one value (a CSV column): not lists, dicts or nested records (annotations are text here)
SCALAR_FIELDS = tuple(f.name for f in fields(CellResult) if not any(t in f.type for t in ("list", "dict", "Attention")))


def _from_v1(data: dict) -> dict:
    """A cell from before the schema version: every field it lacks (added to cells since) at its n/a value."""
    missing = [k for k in V1_REQUIRED if k not in data]
    if missing:
        raise CellProblem(f"no {', '.join(missing)}")
    defaults = {f.name: f.default if f.default_factory is MISSING else f.default_factory()
                for f in fields(CellResult) if f.name not in V1_REQUIRED}
    return {**defaults, **data, "schema": 2}


def _from_v2(data: dict) -> dict:
    """A cell from before DoPE (evaluation/dope.py): no row chose heads, so `dope_heads` is n/a."""
    return {"dope_heads": None, **data, "schema": 3}


MIGRATIONS: dict[int, Callable[[dict], dict]] = {1: _from_v1, 2: _from_v2}  # version n -> version n + 1


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


def _unknown(keys, known: tuple[str, ...], where: str) -> None:
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise CellProblem(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}{where} "
                          f"(a schema-{SCHEMA} cell result has {', '.join(known)})")


def _current(data) -> dict:
    """`data` lifted to the current schema, every field present and none unknown."""
    if not isinstance(data, dict):
        raise CellProblem(f"a JSON {type(data).__name__}, not a cell's result object")
    version = data.get("schema", 1)
    if type(version) is not int or not 1 <= version <= SCHEMA:
        raise CellProblem(f"schema {version!r} is not a cell result version this posbench reads (1 to {SCHEMA}); "
                          "a newer posbench wrote it")
    while version < SCHEMA:
        data, version = MIGRATIONS[version](data), version + 1
    data = {k: v for k, v in data.items() if k != "schema"}
    _unknown(data, FIELDS, "")
    missing = [k for k in FIELDS if k not in data]
    if missing:
        raise CellProblem(f"no {', '.join(missing)}")
    return data


def _check(data: dict, cell_id: str | None) -> None:
    """The value rule and the identity fields' types (see the module docstring)."""
    for key in TEXT_FIELDS:
        if not isinstance(data[key], str):
            raise CellProblem(f"{key} is {value_problem(data[key]) or data[key]}, not text")
    if type(data["seed"]) is not int:
        raise CellProblem(f"seed is {data['seed']!r}, not an integer")
    if not isinstance(data["axes"], dict):
        raise CellProblem("axes is not an object")
    if cell_id is not None and data["cell_id"] != cell_id:
        raise CellProblem(f"holds cell {data['cell_id']!r}, not {cell_id!r}")
    curve = data["curve"]
    if not isinstance(curve, list) or not all(isinstance(point, dict) for point in curve):
        raise CellProblem("curve is not a list of objects")
    for i, point in enumerate(curve):
        _unknown(point, POINT_FIELDS, f" in curve[{i}]")
        if type(point.get("step")) is not int:
            raise CellProblem(f"curve[{i}].step is {point.get('step')!r}, not an integer")
    named = [(k, data[k]) for k in METRIC_FIELDS]
    named += [(f"curve[{i}].{k}", point.get(k)) for i, point in enumerate(curve) for k in CURVE_METRICS]
    for key, value in named:
        problem = value_problem(value)
        if problem is not None:
            raise CellProblem(f"{key} is {problem}")
    problem = _bad_number(data, "")
    if problem is not None:
        raise CellProblem(problem)
    attention = data["attention"]
    if attention is not None and (not isinstance(attention, dict) or set(attention) != {"tokens", "probs"}):
        raise CellProblem("attention is not an object of tokens and probs")


def parse_cell(data, cell_id: str | None = None) -> CellResult:
    """A cell's result from its JSON object (any schema version); CellProblem naming what is wrong: not an object,
    a field missing, unknown or of the wrong type, a value that is not None or a finite number, another cell's id."""
    data = _current(data)
    _check(data, cell_id)
    attention = data["attention"]
    curve = [CurvePoint(**{**p, "exact_by_digits": _int_keys(p.get("exact_by_digits"), f"curve[{i}].exact_by_digits")})
             for i, p in enumerate(data["curve"])]
    return CellResult(**{**data, "curve": curve, "attention": None if attention is None else Attention(**attention),
                         "acc_by_length": _int_keys(data["acc_by_length"], "acc_by_length"),
                         "exact_by_digits": _int_keys(data["exact_by_digits"], "exact_by_digits")})


def _int_keys(by: dict | None, key: str) -> dict[int, float] | None:
    """A dict keyed by a length or digit count, its keys (JSON's text) as ints."""
    if by is None:
        return None
    if not isinstance(by, dict):
        raise CellProblem(f"{key} is not an object")
    try:
        return {int(k): v for k, v in by.items()}
    except ValueError:
        raise CellProblem(f"{key} has a key that is not an integer: {', '.join(map(repr, by))}") from None


def problem_of(data, cell_id: str | None = None) -> str | None:
    """Why `data` (a JSON object) is not a finished cell's result, None when it is one."""
    try:
        parse_cell(data, cell_id)
    except CellProblem as e:
        return str(e)
    return None


def cell_problem(text: str, cell_id: str | None = None) -> str | None:
    """Why `text` (a cell file's contents) is not a finished cell's result, or None when it is one."""
    try:
        data = json.loads(text)
    except ValueError as e:
        return f"not JSON ({e})"
    return problem_of(data, cell_id)


def loads_cell(text: str, where: str, cell_id: str | None = None) -> CellResult:
    """A cell's result from its file's contents; DataError naming `where` (the file) and what is wrong."""
    try:
        return parse_cell(json.loads(text), cell_id)
    except ValueError as e:  # not JSON, or a CellProblem
        problem = f"not JSON ({e})" if not isinstance(e, CellProblem) else str(e)
        raise DataError(f"{where}: {problem}; a cell's values are numbers or null (n/a). Move the file aside and "
                        "run the study again to redo that cell") from None


def dumps_cell(result: CellResult) -> str:
    """A cell file's contents (sorted keys; a NaN is never written: allow_nan makes it a ValueError)."""
    return json.dumps(result.to_data(), sort_keys=True, allow_nan=False)
