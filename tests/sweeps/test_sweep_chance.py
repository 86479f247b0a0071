"""The sweep report's chance sentence measures what its table measures: exact match of whole answers."""

from types import SimpleNamespace

from posbench.sweeps.sweep_report import chance_line


def cell(task, split, per_token, whole=None):
    c = {"task": task, "split": split, "chance_per_token": per_token}
    if whole is not None:
        c["chance_whole_answer"] = whole
    return c


def test_whole_answer_chance_per_task_and_split_with_older_results_labelled_per_token():
    runs = [SimpleNamespace(name="a"), SimpleNamespace(name="b")]
    results = {
        # reverse: 3 letters of 26 at ID (1/26^3), 9 at OOD: ~0; k_back: one yes/no answer
        "a": {"suites": {"algorithmic": {"cells": [cell("reverse", "id", 1 / 26, 26.0 ** -3),
                                                   cell("reverse", "ood", 1 / 26, 26.0 ** -9),
                                                   cell("k_back", "id", 0.5, 0.5)]}}},
        "b": {"suites": {"algorithmic": {"cells": [cell("sort", "id", 0.1)]}}},  # written before the field
    }
    assert chance_line(runs, results) == "k_back 50.0% ID, reverse 0.0% ID / 0.0% OOD, sort 10% per token"
