"""studies/study_compare.py: two runs of a study agree or not, on hand-made cell results."""

import copy
import json

import pytest

from posbench.errors import ConfigError
from posbench.studies.cell_result import CellProblem, parse_cell
from posbench.studies.study_compare import compare, read_cells, verdicts


def typed(dicts: list[dict]) -> list:
    return [parse_cell(d) for d in dicts]


def cells(values: dict[str, list[float]], loss: float = 1.0) -> list[dict]:
    """One task, PEs -> per-seed ood_beyond_acc; the other metrics fixed per seed (the old keyless format, as
    results.json files written before the schema version hold it; `typed` reads them)."""
    out = []
    for pe, accs in values.items():
        for seed, acc in enumerate(accs):
            out.append({"cell_id": f"t_{pe}_s{seed}", "task": "t", "pe": pe, "seed": seed, "axes": {},
                        "ood_beyond_acc": acc, "id_acc": 1.0, "ood_acc": acc, "id_loss": loss + 0.1 * seed,
                        "ood_loss": 2.0})
    return out


BASE = {"a": [0.9, 0.92, 0.91], "b": [0.5, 0.52, 0.55], "c": [0.5, 0.55, 0.52]}


def test_verdicts_read_like_the_report():
    v = verdicts(typed(cells(BASE)), "ood_beyond_acc", 0.95, 2000)
    # a is 37-40 points above b and c on every seed; b and c swap order across seeds within 5 points: undecided
    assert v == {("t", (), "a", "b"): ">", ("t", (), "a", "c"): ">", ("t", (), "b", "c"): "?"}


def test_identical_runs_and_float_rounding_agree():
    before = cells(BASE)
    after = copy.deepcopy(before)
    for r in after:
        r["id_loss"] *= 1 + 1e-7  # what batching changes: the 7th digit of a loss
    ag = compare(typed(before), typed(after), n_boot=2000)
    assert ag.same_conclusions and ag.pairs == ag.same == 3 and not (ag.differ or ag.numbers)


def test_a_contradiction_a_weaker_verdict_and_a_mean_outside_the_interval_are_reported():
    after = cells({**BASE, "c": [0.95, 0.96, 0.97]})  # c now above a: the a-c ordering flips, b-c separates
    ag = compare(typed(cells(BASE)), typed(after), n_boot=2000)
    assert not ag.same_conclusions
    assert ag.contradictions == ["t a vs c on ood_beyond_acc: before `>`, after `<`"]
    assert ag.differ == ["t b vs c on ood_beyond_acc: before `?`, after `<`"]  # decided in one run only
    assert any(line.startswith("t c ood_beyond_acc") for line in ag.numbers)  # c's mean left the other interval


def test_a_verdict_decided_in_one_run_only_is_no_contradiction():
    after = cells({**BASE, "c": [0.53, 0.57, 0.55]})  # b - c now -3, -5, -0: still undecided; a still above both
    close = cells({**BASE, "b": [0.70, 0.72, 0.75]})  # a - b shrinks: ordered in both, the same verdicts
    assert compare(typed(cells(BASE)), typed(after), n_boot=2000).same_conclusions
    assert compare(typed(cells(BASE)), typed(close), n_boot=2000).same_conclusions


def test_read_cells_from_a_dir_or_a_file(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"study": "s", "cells": cells(BASE)}))
    assert read_cells(tmp_path) == read_cells(tmp_path / "results.json") == typed(cells(BASE))


def test_a_damaged_results_file_is_bad_input_naming_it(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text('{"cells": [')
    with pytest.raises(ConfigError, match="results.json: not a study's results.json \\(not JSON"):
        read_cells(tmp_path)
    bad.write_text(json.dumps({"cells": [{"cell_id": "x", "task": "t"}]}))
    with pytest.raises(ConfigError, match="cell 0 is not a cell's result \\(no pe, seed, axes\\)"):
        read_cells(bad)


def write(tmp_path, name, cell_list):
    (tmp_path / name).mkdir()
    (tmp_path / name / "results.json").write_text(json.dumps({"study": "s", "cells": cell_list}))
    return str(tmp_path / name)


def test_item2_a_seed_that_is_not_a_finite_number_is_bad_input_not_same_conclusions(tmp_path, capsys):
    """Item 2: with every RoPE seed NaN, compare_studies.py said "same conclusions" and exited 0."""
    from scripts.compare_studies import main

    nan = cells({**BASE, "a": [float("nan")] * 3})
    before, after = write(tmp_path, "before", nan), write(tmp_path, "after", copy.deepcopy(nan))
    assert main([before, after, "--n-boot", "200"]) == 2
    err = capsys.readouterr().err
    assert "cell 0" in err and "ood_beyond_acc is nan, not a finite number" in err
    with pytest.raises(CellProblem, match="ood_beyond_acc is '0.9', not a number"):
        typed(cells({**BASE, "a": ["0.9", 0.9, 0.9]}))


def test_item3_no_pair_judged_in_both_runs_is_said_and_is_not_same_conclusions(tmp_path, capsys):
    """Item 3: two seeds (no pair can be judged) gave "same conclusions", exit 0."""
    from scripts.compare_studies import main

    two = cells({pe: v[:2] for pe, v in BASE.items()})
    ag = compare(typed(two), typed(two), n_boot=200)
    assert ag.pairs == 0 and not ag.same_conclusions
    assert main([write(tmp_path, "a", two), write(tmp_path, "b", copy.deepcopy(two)), "--n-boot", "200"]) == 1
    out = capsys.readouterr().out
    assert "no PE pair was judged in both runs" in out
    assert out.splitlines()[-1] == "not shown to reach the same conclusions"


def test_item3_cells_are_matched_by_what_they_are_not_only_by_id():
    """Item 3: cells were matched by id only: PEs renamed under the same ids gave "same conclusions" (no pair in
    common was judged, and nothing said so)."""
    before = cells(BASE)
    after = copy.deepcopy(before)
    for r in after:
        r["pe"] = {"a": "x", "b": "y", "c": "z"}[r["pe"]]
    ag = compare(typed(before), typed(after), n_boot=200)
    assert not ag.same_conclusions
    assert any("t a s0" in line and "t x s0" in line for line in ag.cells), ag.cells


def test_item3_two_results_of_one_cell_are_refused(tmp_path):
    """Item 3: a cell copied under another id was read as a second cell and overwrote the first's seed."""
    dup = cells(BASE)
    dup.append({**dup[0], "cell_id": "t_a_s0_copy"})
    (tmp_path / "results.json").write_text(json.dumps({"cells": dup}))
    with pytest.raises(ConfigError, match="cells 0 and 9 are both task t, PE a, seed 0"):
        read_cells(tmp_path)
