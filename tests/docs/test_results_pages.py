"""Every published table and verdict resolves to committed data: each page under docs/results/ (and the README's
headline table) is what `posbench results render` makes of results/<name>/ now, and one number changed in the data
changes the page, so a hand edit of either side fails here."""

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from posbench.errors import ConfigError
from posbench.studies.published import (
    HEADLINE_METRIC,
    README_BLOCKS,
    Result,
    headline_table,
    index,
    page,
    published,
    timings,
    write_result,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS, DOCS = ROOT / "results", ROOT / "docs" / "results"
NAMES = sorted(p.name for p in RESULTS.iterdir() if p.is_dir())
BLOCK = re.compile(r"<!-- results: (\w+) (\w+) -->\n(.*?)\n<!-- /results -->", re.DOTALL)


def test_there_are_published_results_and_every_page_has_its_data():
    assert "quickstart" in NAMES
    pages = sorted(p.stem for p in DOCS.glob("*.md") if p.name != "index.md")
    assert pages == NAMES, "a page without its data under results/ (or data without its page)"


@pytest.mark.parametrize("name", NAMES)
def test_the_page_is_what_its_data_gives(name):
    assert (DOCS / f"{name}.md").read_text() == page(Result(RESULTS / name)) + "\n", \
        f"docs/results/{name}.md differs from its data: run `posbench results render {name}`"
    assert (DOCS / name / "id_ood_bars.png").is_file()


def test_the_index_is_what_the_data_gives():
    assert (DOCS / "index.md").read_text() == index(published(RESULTS))


def test_the_readme_blocks_are_what_the_data_gives():
    found = BLOCK.findall((ROOT / "README.md").read_text())
    assert [(n, b) for n, b, _ in found] == [("quickstart", "headline"), ("quickstart", "timings")]
    for name, block, text in found:
        assert text == README_BLOCKS[block](Result(RESULTS / name)), \
            f"README's {name} {block} block differs from its data: paste README_BLOCKS[{block!r}] of it"


def test_the_timings_table_lists_every_measured_run_and_refuses_an_incomplete_one(tmp_path):
    copy = tmp_path / "quickstart"
    shutil.copytree(RESULTS / "quickstart", copy)
    (copy / "timings.json").write_text(json.dumps([{"cpu": "X", "flags": ["avx2"], "cores": 4, "wall_s": 125.4,
                                                     "cpu_s": 480, "conditions": "quiet", "measured_by": "a test"}]))
    table = README_BLOCKS["timings"](Result(copy))
    assert table.splitlines()[-1] == "| X (AVX2) | 4 | 2 min 5 s | 480 s | quiet | a test |"  # 125.4 s by hand
    assert len(timings(Result(copy))) == 2  # run.json's own run first
    (copy / "timings.json").write_text(json.dumps([{"cpu": "X"}]))
    with pytest.raises(ConfigError, match="run 0 lacks flags, cores, wall_s"):
        timings(Result(copy))


@pytest.mark.parametrize("name", NAMES)
def test_one_number_changed_in_the_data_changes_the_page(name, tmp_path):
    copy = tmp_path / name
    shutil.copytree(RESULTS / name, copy)
    cells = json.loads((copy / "cells.json").read_text())
    cell = next(c for c in cells if c.get(HEADLINE_METRIC) is not None)
    # one seed's headline accuracy moved by 25 points, inside [0, 1]: its row's printed mean moves with it
    cell[HEADLINE_METRIC] += 0.25 if cell[HEADLINE_METRIC] <= 0.75 else -0.25
    (copy / "cells.json").write_text(json.dumps(cells))
    assert page(Result(copy)) != (DOCS / f"{name}.md").read_text().removesuffix("\n")


def test_one_number_changed_in_the_quickstart_moves_the_headline_as_by_hand(tmp_path):
    copy = tmp_path / "quickstart"
    shutil.copytree(RESULTS / "quickstart", copy)
    cells = json.loads((copy / "cells.json").read_text())
    cell = next(c for c in cells if c["cell_id"] == "k_back_rope_s0")
    cell["ood_beyond_acc"] -= 0.5  # one seed of RoPE's headline number: its mean drops 10 points
    (copy / "cells.json").write_text(json.dumps(cells))
    changed = Result(copy)
    assert headline_table(changed) != headline_table(Result(RESULTS / "quickstart"))
    assert "| k_back | rope (88.5%) |" in headline_table(changed)


def test_a_study_run_writes_the_data_form_and_the_command_renders_it(tmp_path):
    from posbench.studies.study_runner import run_study
    from posbench.studies.study_spec import load_study

    spec = tmp_path / "mini.yaml"
    spec.write_text("name: mini\ntasks: [{name: k_back, k: 2}]\npes: [{name: rope}, {name: learned}]\n"
                    "seeds: [0, 1]\noverrides: [model.d_model=32, model.n_heads=2, model.n_layers=1, model.d_ff=64]\n"
                    "train: {steps: 12, batch_size: 8, curve_points: 2}\neval: {n_examples: 24, n_boot: 500}\n"
                    "workers: 1\n")
    out = tmp_path / "out"
    run_study(load_study(str(spec)), out, progress=False, command="posbench study mini.yaml")
    run = json.loads((out / "result" / "run.json").read_text())
    assert run["command"] == "posbench study mini.yaml" and run["wall_s"] > 0 and run["cpu_s"] > 0
    assert run["machine"]["device"] == "cpu" and run["machine"]["cores"] >= 1 and run["machine"]["cpu"]
    cells = json.loads((out / "result" / "cells.json").read_text())
    assert [c["cell_id"] for c in cells] == ["k_back_rope_s0", "k_back_rope_s1", "k_back_learned_s0",
                                             "k_back_learned_s1"] and all(c["attention"] is None for c in cells)
    # publish: copy the folder, render
    shutil.copytree(out / "result", tmp_path / "results" / "mini")
    proc = subprocess.run([sys.executable, "-m", "posbench", "results", "render", "mini", "--results",
                           str(tmp_path / "results"), "--docs", str(tmp_path / "docs")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "docs" / "mini.md").read_text()
    assert "| k_back | rope |" in text and "x 2 seeds" not in text and "2 seeds, 12 steps" in text
    assert (tmp_path / "docs" / "mini" / "id_ood_bars.png").stat().st_size > 0
    assert "[mini](mini.md)" in (tmp_path / "docs" / "index.md").read_text()


def test_bad_result_folders_are_one_line_errors_before_anything_is_written(tmp_path):
    (tmp_path / "results" / "broken").mkdir(parents=True)
    (tmp_path / "results" / "broken" / "cells.json").write_text("[]")
    proc = subprocess.run([sys.executable, "-m", "posbench", "results", "render", "--results",
                           str(tmp_path / "results"), "--docs", str(tmp_path / "docs")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "study.json, run.json missing" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "docs").exists()
    proc = subprocess.run([sys.executable, "-m", "posbench", "results", "render", "nonesuch", "--results",
                           str(tmp_path / "results")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no result folder nonesuch" in proc.stderr


def test_write_result_keeps_no_attention_maps(tmp_path):
    from posbench.studies.cell_result import Attention, CellResult, parse_cell
    from posbench.studies.study_spec import load_study

    cell = CellResult(cell_id="x", task="t", pe="rope", seed=0, axes={}, attention=Attention(["a"], [[[[1.0]]]]),
                      id_acc=0.5)
    folder = write_result(tmp_path, [cell], load_study("quickstart"), "c", 1.0, 2.0)
    (kept,) = json.loads((folder / "cells.json").read_text())
    assert kept["attention"] is None and kept["id_acc"] == 0.5 and kept["schema"] == 3
    assert parse_cell(kept) == replace(cell, attention=None)

