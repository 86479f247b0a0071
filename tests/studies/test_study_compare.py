"""studies/study_compare.py: two runs of a study agree or not, on hand-made cell results."""

import copy
import json

import pytest

from posbench.errors import ConfigError
from posbench.studies.study_compare import compare, read_cells, verdicts


def cells(values: dict[str, list[float]], loss: float = 1.0) -> list[dict]:
    """One task, PEs -> per-seed ood_beyond_acc; the other metrics fixed per seed."""
    out = []
    for pe, accs in values.items():
        for seed, acc in enumerate(accs):
            out.append({"cell_id": f"t_{pe}_s{seed}", "task": "t", "pe": pe, "seed": seed, "axes": {},
                        "ood_beyond_acc": acc, "id_acc": 1.0, "ood_acc": acc, "id_loss": loss + 0.1 * seed,
                        "ood_loss": 2.0})
    return out


BASE = {"a": [0.9, 0.92, 0.91], "b": [0.5, 0.52, 0.55], "c": [0.5, 0.55, 0.52]}


def test_verdicts_read_like_the_report():
    v = verdicts(cells(BASE), "ood_beyond_acc", 0.95, 2000)
    # a is 37-40 points above b and c on every seed; b and c swap order across seeds within 5 points: undecided
    assert v == {("t", (), "a", "b"): ">", ("t", (), "a", "c"): ">", ("t", (), "b", "c"): "?"}


def test_identical_runs_and_float_rounding_agree():
    before = cells(BASE)
    after = copy.deepcopy(before)
    for r in after:
        r["id_loss"] *= 1 + 1e-7  # what batching changes: the 7th digit of a loss
    ag = compare(before, after, n_boot=2000)
    assert ag.same_conclusions and ag.pairs == ag.same == 3 and not (ag.differ or ag.numbers)


def test_a_contradiction_a_weaker_verdict_and_a_mean_outside_the_interval_are_reported():
    after = cells({**BASE, "c": [0.95, 0.96, 0.97]})  # c now above a: the a-c ordering flips, b-c separates
    ag = compare(cells(BASE), after, n_boot=2000)
    assert not ag.same_conclusions
    assert ag.contradictions == ["t a vs c on ood_beyond_acc: before `>`, after `<`"]
    assert ag.differ == ["t b vs c on ood_beyond_acc: before `?`, after `<`"]  # decided in one run only
    assert any(line.startswith("t c ood_beyond_acc") for line in ag.numbers)  # c's mean left the other interval


def test_a_verdict_decided_in_one_run_only_is_no_contradiction():
    after = cells({**BASE, "c": [0.53, 0.57, 0.55]})  # b - c now -3, -5, -0: still undecided; a still above both
    close = cells({**BASE, "b": [0.70, 0.72, 0.75]})  # a - b shrinks: ordered in both, the same verdicts
    assert compare(cells(BASE), after, n_boot=2000).same_conclusions
    assert compare(cells(BASE), close, n_boot=2000).same_conclusions


def test_read_cells_from_a_dir_or_a_file(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"study": "s", "cells": cells(BASE)}))
    assert read_cells(tmp_path) == read_cells(tmp_path / "results.json") == cells(BASE)


def test_a_damaged_results_file_is_bad_input_naming_it(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text('{"cells": [')
    with pytest.raises(ConfigError, match="results.json: not a study's results.json \\(not JSON"):
        read_cells(tmp_path)
    bad.write_text(json.dumps({"cells": [{"cell_id": "x", "task": "t"}]}))
    with pytest.raises(ConfigError, match="cell 0 is not a cell's result \\(no pe, seed, axes\\)"):
        read_cells(bad)
