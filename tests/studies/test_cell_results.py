"""Reading finished cells: `--report-only` changes nothing and names what it cannot report (item 1); a value that
is not a finite number is refused where a cell is read, never judged (item 2); a negative seed is refused before any
file is made, and cells whose spec file is gone are still checked against this study's settings (item 13)."""

import json
import shutil

import pytest

from posbench.cli.study import main as study_main
from posbench.errors import ConfigError, DataError
from posbench.studies.study_spec import load_study
from tests.studies.test_study import MINI, mini


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The mini study (rope and learned, seed 0) trained once; each test works on its own copy."""
    root = tmp_path_factory.mktemp("trained")
    spec = mini(root)
    assert study_main([str(spec), "--out", str(root / "out"), "--no-progress"]) == 0
    return root / "out"


def copy_of(trained, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(trained, out)
    return out


def snapshot(out):
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def report_only(tmp_path, out, *args):
    return study_main([str(mini(tmp_path)), "--out", str(out), "--no-progress", "--report-only", *args])


def test_item1_report_only_names_a_damaged_or_foreign_cell_and_deletes_nothing(trained, tmp_path, capsys):
    """Item 1: `--report-only` deleted a damaged cell file, and a valid cell copied under another id, saying "running
    the cell again" before exiting 2. Now it names them, exits 2, and every file is as it was."""
    out = copy_of(trained, tmp_path)
    rope = out / "cells" / "k_back_rope_s0.json"
    good = rope.read_bytes()
    rope.write_bytes(good[: len(good) // 2])
    before = snapshot(out)
    assert report_only(tmp_path, out) == 2
    err = capsys.readouterr().err
    assert "k_back_rope_s0" in err and "not JSON" in err and "running the cell again" not in err
    assert snapshot(out) == before
    rope.write_bytes((out / "cells" / "k_back_learned_s0.json").read_bytes())  # a valid cell under another id
    before = snapshot(out)
    assert report_only(tmp_path, out) == 2
    assert "holds cell 'k_back_learned_s0', not 'k_back_rope_s0'" in capsys.readouterr().err
    assert snapshot(out) == before


def test_item1_report_only_into_a_missing_directory_makes_nothing(tmp_path, capsys):
    """Item 1: `--report-only` made cells/, specs/, logs/ and work/ in a directory it then found empty."""
    out = tmp_path / "nothing_here"
    assert report_only(tmp_path, out) == 2
    assert "2 of 2 cells are not finished" in capsys.readouterr().err
    assert not out.exists()


def test_item1_a_damaged_cell_is_moved_aside_not_deleted_when_the_study_runs(trained, tmp_path, capsys):
    """Item 1: a run that redoes a damaged cell keeps the damaged file beside it, so nothing written is lost."""
    out = copy_of(trained, tmp_path)
    rope = out / "cells" / "k_back_rope_s0.json"
    good = rope.read_bytes()
    rope.write_bytes(good[:100])
    assert study_main([str(mini(tmp_path)), "--out", str(out), "--no-progress"]) == 0
    kept = out / "cells" / "k_back_rope_s0.json.damaged"
    assert kept.read_bytes() == good[:100] and f"moved to {kept}" in capsys.readouterr().out
    assert rope.read_bytes() == good  # the cell is deterministic in its seed
    rope.write_bytes(good[:50])  # damaged again: the earlier copy stays, the new one goes beside it
    assert study_main([str(mini(tmp_path)), "--out", str(out), "--no-progress"]) == 0
    assert kept.read_bytes() == good[:100] and (out / "cells" / "k_back_rope_s0.json.damaged.1").read_bytes() == \
        good[:50]


@pytest.mark.parametrize("value, why", [("NaN", "nan, not a finite number"), ("Infinity", "inf, not a finite number"),
                                        ('"0.5"', "'0.5', not a number"), ("true", "True, not a number"),
                                        ("1e999", "inf, not a finite number")])
def test_item2_a_cell_value_that_is_not_a_finite_number_is_refused_where_it_is_read(trained, tmp_path, capsys,
                                                                                   value, why):
    """Item 2: a cell with `ood_beyond_acc: nan` gave a report (exit 0) with `nan [no interval]`; a string was a
    TypeError traceback. Now the cell is named with its value, exit 2, and no report is written."""
    out = copy_of(trained, tmp_path)
    (out / "report.md").unlink()
    rope = out / "cells" / "k_back_rope_s0.json"
    text = rope.read_text()
    data = json.loads(text)
    old = json.dumps(data["ood_beyond_acc"])
    assert f'"ood_beyond_acc": {old}' in text
    rope.write_text(text.replace(f'"ood_beyond_acc": {old}', f'"ood_beyond_acc": {value}'))
    assert report_only(tmp_path, out) == 2
    err = capsys.readouterr().err
    assert "k_back_rope_s0" in err and "ood_beyond_acc" in err and why in err and "Traceback" not in err
    assert not (out / "report.md").exists()


def test_item2_the_cell_reader_by_hand():
    """Item 2: one reader decides what a cell's values may be: None (n/a) or a finite number, anywhere in the file."""
    from posbench.studies.cell_result import loads_cell, problem_of

    base = {"cell_id": "t_rope_s0", "task": "t", "pe": "rope", "seed": 0, "axes": {}, "id_acc": 0.5,
            "ood_beyond_acc": None, "curve": [{"step": 2, "id_acc": 0.25}]}
    assert problem_of(base) is None and problem_of(base, "t_rope_s0") is None
    assert problem_of({**base, "id_acc": float("nan")}) == "id_acc is nan, not a finite number"
    assert problem_of({**base, "seed": 1.5}) == "seed is 1.5, not an integer"
    assert problem_of({**base, "curve": [{"step": 2, "id_acc": "x"}]}) == "curve[0].id_acc is 'x', not a number"
    nested = json.dumps({**base, "acc_by_length": {"16": float("inf")}})  # json writes Infinity
    with pytest.raises(DataError, match=r"cells/a.json: acc_by_length.16 is inf, not a finite number"):
        loads_cell(nested, "cells/a.json")
    read = loads_cell(json.dumps(base), "cells/t_rope_s0.json")
    assert (read.cell_id, read.id_acc, read.ood_beyond_acc, read.curve[0].step, read.curve[0].id_acc) == \
        ("t_rope_s0", 0.5, None, 2, 0.25)


def test_item13_a_negative_seed_is_refused_before_any_file_is_made(tmp_path, capsys):
    """Item 13: `seeds: [-1]` was refused by the task source only after cells/, logs/ and specs/ were made."""
    spec = tmp_path / "neg.yaml"
    spec.write_text(MINI.replace("SEEDS", "-1"))
    with pytest.raises(ConfigError, match=r"seeds must be integers >= 0"):
        load_study(str(spec))
    out = tmp_path / "out"
    assert study_main([str(spec), "--out", str(out), "--no-progress"]) == 2
    assert "seeds must be integers >= 0" in capsys.readouterr().err and not out.exists()


def test_item13_cells_without_their_spec_files_are_still_checked_against_the_study(trained, tmp_path, capsys):
    """Item 13: with specs/ removed, `--report-only` under another step count labelled the old cells with the new
    one. A cell keeps its own spec, so the changed setting is named and nothing is reported."""
    out = copy_of(trained, tmp_path)
    shutil.rmtree(out / "specs")
    (out / "report.md").unlink()
    longer = tmp_path / "longer.yaml"
    longer.write_text(MINI.replace("SEEDS", "0").replace("steps: 12", "steps: 14"))
    assert study_main([str(longer), "--out", str(out), "--no-progress", "--report-only"]) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "(train)" in err
    assert not (out / "report.md").exists()
    assert report_only(tmp_path, out) == 0  # the settings they were made with: reported
