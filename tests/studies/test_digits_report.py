"""The arithmetic report's tables from hand-built cells: exact match per digit count, and exact match at the
longest tested digit count at each learning-curve checkpoint (both means with t-intervals over seeds)."""

from posbench.studies.digits_report import longest_by_step, longest_curve_table


def cell(pe, seed, curve):
    # JSON keys, as results.json gives them back: digit counts are strings
    return {"task": "addition", "pe": pe, "seed": seed,
            "curve": [{"step": s, "exact_by_digits": {str(d): v for d, v in by.items()}} for s, by in curve]}


RESULTS = [cell("coupled", 0, [(100, {2: 1.0, 8: 0.25}), (200, {2: 1.0, 8: 0.75})]),
           cell("coupled", 1, [(100, {2: 1.0, 8: 0.5}), (200, {2: 1.0, 8: 1.0})]),
           cell("no_pad", 0, [(100, {2: 0.5, 8: 0.0}), (200, {2: 1.0, 8: 0.0})]),
           cell("no_pad", 1, [(100, {2: 0.5, 8: 0.0}), (200, {2: 1.0, 8: 0.0})]),
           {"task": "addition", "pe": "old", "seed": 0, "curve": [{"step": 100, "id_acc": 0.5}]}]  # no digits


def test_longest_by_step_takes_the_longest_count_of_every_snapshot():
    longest, by = longest_by_step(RESULTS, "addition")
    assert longest == 8
    assert by["coupled"] == {100: [0.25, 0.5], 200: [0.75, 1.0]}
    assert by["no_pad"] == {100: [0.0, 0.0], 200: [0.0, 0.0]}
    assert "old" not in by  # a cell written before the curve kept digits has no row


def test_longest_curve_table_means_per_step():
    table = longest_curve_table(RESULTS, confidence=0.95, n_boot=200)
    lines = table.splitlines()
    assert lines[0] == "**addition** at 8 digits per operand (the longest tested), by training step"
    assert lines[2] == "| PE | 100 | 200 |"
    coupled = next(line for line in lines if line.startswith("| coupled |"))
    # means of 0.25/0.5 and 0.75/1.0: 37.5% and 87.5%
    assert coupled.split("|")[2].strip().startswith("37.5") and coupled.split("|")[3].strip().startswith("87.5")
    assert next(line for line in lines if line.startswith("| no_pad |")).split("|")[2].strip().startswith("0.0")


def test_no_curve_digits_no_table():
    assert longest_curve_table([RESULTS[-1]], 0.95, 200) == ""
    assert longest_by_step([], "addition") == (None, {})
    assert longest_curve_table([], 0.95, 200) == ""
