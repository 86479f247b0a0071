"""The arithmetic report's by-step table from hand-built cells: exact match at the longest trained digit count
and on groups of untrained counts (up to the longest tested) at each learning-curve checkpoint, means with
t-intervals over seeds."""

import pytest

from posbench.studies.cell_result import parse_cell
from posbench.studies.digits_report import beyond_by_step, beyond_curve_table, beyond_groups


def cell(pe, seed, curve):
    # JSON keys, as results.json gives them back: digit counts are strings (the reader makes them ints)
    return parse_cell({"cell_id": f"addition_{pe}_s{seed}", "task": "addition", "pe": pe, "seed": seed, "axes": {},
                       "id_digits": 2, "curve": [{"step": s, "exact_by_digits": {str(d): v for d, v in by.items()}}
                                                 for s, by in curve]})


RESULTS = [cell("coupled", 0, [(100, {2: 1.0, 3: 1.0, 4: 0.5, 5: 0.0, 6: 0.25}),
                               (200, {2: 1.0, 3: 1.0, 4: 1.0, 5: 0.5, 6: 0.75})]),
           cell("coupled", 1, [(100, {2: 1.0, 3: 0.0, 4: 0.5, 5: 0.0, 6: 0.5}),
                               (200, {2: 1.0, 3: 1.0, 4: 0.0, 5: 0.5, 6: 1.0})]),
           parse_cell({"cell_id": "addition_old_s0", "task": "addition", "pe": "old", "seed": 0, "axes": {},
                       "id_digits": 2, "curve": [{"step": 100, "id_acc": 0.5}]})]  # before snapshots kept digits


@pytest.mark.parametrize("trained,longest,groups", [
    (10, 30, [(11, 11), (12, 15), (16, 20), (21, 30)]),  # 1.5x = 15, 2x = 20
    (4, 16, [(5, 5), (6, 6), (7, 8), (9, 16)]),
    (2, 6, [(3, 3), (4, 4), (5, 6)]),  # 1.5 x 2 = 3 is the first untrained count already: no group of its own
    (10, 11, [(11, 11)]),
])
def test_beyond_groups(trained, longest, groups):
    assert beyond_groups(trained, longest) == groups


def test_beyond_by_step_means_each_group_per_seed():
    groups, by = beyond_by_step(RESULTS, "addition")
    assert groups == [(2, 2), (3, 3), (4, 4), (5, 6)]  # the longest trained count, then the groups past it
    assert by[("coupled", (2, 2))] == {100: [1.0, 1.0], 200: [1.0, 1.0]}
    assert by[("coupled", (3, 3))] == {100: [1.0, 0.0], 200: [1.0, 1.0]}
    assert by[("coupled", (5, 6))] == {100: [0.125, 0.25], 200: [0.625, 0.75]}  # (0 + .25) / 2, ...
    assert not any(pe == "old" for pe, _ in by)


def test_beyond_curve_table_rows_per_group_columns_per_step():
    lines = beyond_curve_table(RESULTS, confidence=0.95, n_boot=200).splitlines()
    assert lines[2] == "| PE | digits | 100 | 200 |"
    row = next(line for line in lines if line.startswith("| coupled | 5-6 |")).split("|")
    # means over the two seeds: (0.125 + 0.25) / 2 = 18.75%, (0.625 + 0.75) / 2 = 68.75%
    assert row[3].strip().startswith("18.8") and row[4].strip().startswith("68.8")


def test_no_curve_digits_no_table():
    assert beyond_curve_table([RESULTS[-1]], 0.95, 200) == ""
    assert beyond_by_step([], "addition") == ([], {})
