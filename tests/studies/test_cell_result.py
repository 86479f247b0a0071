"""studies/cell_result.py: a cell's result is one typed record, written and read by one module with its schema
version in the file; a cell file from before the version (the keyless format, built here as the runner wrote it)
still loads; an unknown field, a missing one in a current file, or a version from a newer posbench is refused,
naming it."""

import json

import pytest

from posbench.errors import DataError
from posbench.studies.cell_result import (
    FIELDS,
    SCHEMA,
    Attention,
    CellProblem,
    CellResult,
    CurvePoint,
    dumps_cell,
    loads_cell,
    parse_cell,
    problem_of,
)

# a cell file as the study runner wrote it before cell results carried a schema version (a subset of its keys:
# cells from then lack the fields added since, e.g. matmul, device, length_grid, spec)
OLD = {"cell_id": "k_back_rope_s0", "task": "k_back", "pe": "rope", "seed": 0, "axes": {}, "arch": "decoder",
       "chance": 0.5, "id_acc": 0.75, "id_exact": 0.5, "id_loss": 0.6, "ood_acc": 0.5, "ood_exact": 0.25,
       "ood_loss": 1.2, "ood_beyond_acc": 0.4, "ood_within_acc": 0.6, "ood_by_position": [None, 1.0, 0.5],
       "gap": 0.35, "curve": [{"step": 4, "id_acc": 0.5, "ood_acc": 0.25}, {"step": 8, "id_acc": 0.75,
                                                                          "ood_acc": 0.5}],
       "train_loss": [{"step": 1, "loss": 2.5}], "acc_by_length": {"10": 0.5, "9": 0.75},
       "exact_by_digits": {}, "attention": {"tokens": ["a", "b"], "probs": [[[[1.0, 0.0], [0.5, 0.5]]]]},
       "seq_len": 8, "ood_len": 16, "params": 1234}


def result(**fields) -> CellResult:
    return CellResult(cell_id="k_back_rope_s0", task="k_back", pe="rope", seed=0, axes={"model.n_layers": 2},
                      id_acc=0.75, ood_beyond_acc=None, chance=0.5, acc_by_length={9: 0.75, 10: 0.5},
                      curve=[CurvePoint(step=4, id_acc=0.5, exact_by_digits={3: 1.0})],
                      attention=Attention(["a"], [[[[1.0]]]]), spec={"seed": 0}, **fields)


def test_a_cell_result_is_written_and_read_back_through_the_dataclass():
    cell = result(matmul="torch")
    text = dumps_cell(cell)
    data = json.loads(text)
    assert data["schema"] == SCHEMA == 3 and set(data) == {"schema", *FIELDS}  # every field, with the version
    assert data["acc_by_length"] == {"9": 0.75, "10": 0.5}  # JSON's text keys on disk ...
    back = loads_cell(text, "cells/k_back_rope_s0.json", "k_back_rope_s0")
    assert back == cell  # ... int keys, nested records and n/a values again when read
    assert back.curve[0].exact_by_digits == {3: 1.0} and back.attention.tokens == ["a"]
    assert back.metric("ood_beyond_acc") is None and back.metric("id_acc") == 0.75
    with pytest.raises(KeyError, match="'params' is not a cell metric"):
        back.metric("params")


def test_a_schema_2_cell_from_before_dope_reads_with_no_dope_heads():
    data = {**result().to_data(), "schema": 2}
    del data["dope_heads"]
    assert parse_cell(data) == result()  # its dope_heads n/a, every other field as written
    data["schema"] = 3
    with pytest.raises(CellProblem, match="no dope_heads"):  # a version-3 file holds every field
        parse_cell(data)


def test_an_unknown_field_is_refused_naming_it():
    data = {**result().to_data(), "ood_beyond_acc_v2": 0.5}
    with pytest.raises(CellProblem, match=r"unknown field 'ood_beyond_acc_v2' \(a schema-3 cell result has "
                                          r"cell_id, task, pe, seed, axes, "):
        parse_cell(data)
    with pytest.raises(DataError, match=r"cells/x.json: unknown field 'ood_beyond_acc_v2'"):
        loads_cell(json.dumps(data), "cells/x.json")
    point = result().to_data()
    point["curve"][0]["beyond"] = 0.5
    assert problem_of(point).startswith("unknown field 'beyond' in curve[0]")
    assert problem_of({**OLD, "id_accuracy": 0.5}).startswith("unknown field 'id_accuracy'")  # old files too
    with pytest.raises(TypeError, match="id_accuracy"):  # a misspelt field fails where the cell is made
        result(id_accuracy=0.5)


def test_the_old_keyless_format_still_loads_through_its_migration():
    cell = parse_cell(OLD)
    assert (cell.id_acc, cell.ood_beyond_acc, cell.gap, cell.params) == (0.75, 0.4, 0.35, 1234)
    assert cell.acc_by_length == {9: 0.75, 10: 0.5} and cell.attention.probs == [[[[1.0, 0.0], [0.5, 0.5]]]]
    assert cell.curve == [CurvePoint(4, 0.5, 0.25), CurvePoint(8, 0.75, 0.5)]
    # the fields it predates are n/a, as the reports read an absent key before
    assert (cell.matmul, cell.device, cell.length_grid, cell.spec, cell.id_generated_exact, cell.dope_heads) == \
        (None,) * 6
    assert json.loads(dumps_cell(cell))["schema"] == 3 and parse_cell(json.loads(dumps_cell(cell))) == cell
    assert problem_of({k: v for k, v in OLD.items() if k not in ("seed", "axes")}) == "no seed, axes"


def test_a_current_file_missing_a_field_or_from_a_newer_posbench_is_refused():
    data = result().to_data()
    del data["matmul"]
    assert problem_of(data) == "no matmul"  # the version says every field is there: one missing is damage
    assert problem_of({**result().to_data(), "schema": 4}).startswith("schema 4 is not a cell result version this "
                                                                      "posbench reads (1 to 3)")
    assert problem_of({**OLD, "schema": "2"}).startswith("schema '2' is not")
