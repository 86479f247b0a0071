"""Sequential seeds (studies/sequential.py, stats_sequential.py): the spec and command-line forms, the boundary, the
looks on hand-made cells (which rows stop, which verdicts are kept), a comparison with a fixed run, a small
calibration that can fail, and a study run sequentially end to end."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from posbench.errors import ConfigError
from posbench.stats_sequential import SPENDING, Boundary, nominal_levels
from posbench.studies.cell_result import CellResult, parse_cell
from posbench.studies.sequential import (
    SequentialSeeds,
    parse_sequential,
    record,
    replay,
    rows_of,
    section,
    used,
    wanted,
)
from posbench.studies.study_compare import compare
from posbench.studies.study_spec import expand, load_study
from scripts.calibrate_stats import simulate_sequential

ROOT = Path(__file__).resolve().parents[2]

SPEC = """
name: seq
tasks: [{name: k_back, k: 2}]
pes: [{name: rope}, {name: learned}, {name: alibi}]
seeds: SEEDS
overrides: [model.d_model=32, model.n_heads=2, model.n_layers=1, model.d_ff=64]
train: {steps: 4, batch_size: 8, curve_points: 1}
eval: {n_examples: 8, n_boot: 200}
workers: 1
"""


def study(tmp_path, seeds="{start: 3, max: 5, step: 1}", extra=""):
    path = tmp_path / "seq.yaml"
    path.write_text(SPEC.replace("SEEDS", seeds) + extra)
    return load_study(str(path))


def test_the_spec_form_loads_and_a_fixed_list_keeps_working(tmp_path):
    s = study(tmp_path)
    assert s.sequential == SequentialSeeds(3, 5, 1) and s.seeds == [0, 1, 2, 3, 4]
    assert s.sequential.looks == (3, 4, 5) and SequentialSeeds(3, 10, 3).looks == (3, 6, 9, 10)
    assert len(expand(s)) == 15  # every cell a row may get; the looks choose which run
    fixed = study(tmp_path, "[0, 1, 2]")
    assert fixed.sequential is None and fixed.seeds == [0, 1, 2]
    assert parse_sequential("3:10") == SequentialSeeds(3, 10, 1) and parse_sequential("4:8:2").looks == (4, 6, 8)


@pytest.mark.parametrize("seeds, says", [
    ("{start: 2, max: 10}", "seeds.start is 2: sequential seeds start at >= 3"),
    ("{start: 5, max: 4}", "seeds.max is 4: it must be >= start (5)"),
    ("{start: 3, max: 10, step: 0}", "seeds.step is 0: it must be >= 1"),
    ("{start: 3, max: 1000}", "seeds.max is 1000"),
    ("{start: 3, max: 10, spending: pocok}", "did you mean `pocock`"),
    ("{start: 3, max: 10, stop: 4}", "unknown config key `study.seeds.stop`"),
])
def test_a_bad_sequential_form_is_one_clear_line(tmp_path, seeds, says):
    with pytest.raises(ConfigError, match=None) as e:
        study(tmp_path, seeds)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_boundary_spends_the_level_over_the_looks():
    assert nominal_levels((5,), 0.025) == (0.025,)  # one look is the fixed test
    obf, pocock = Boundary((3, 4, 5, 6, 7, 8, 9, 10)), Boundary((3, 4, 5, 6, 7, 8, 9, 10), spending="pocock")
    levels = [obf.two_sided(k) for k in range(8)]
    assert levels == sorted(levels) and levels[0] < 0.001 and 0.02 < levels[-1] < 0.05  # little early, most late
    flat = [pocock.two_sided(k) for k in range(8)]
    assert max(flat) < 0.025 and max(flat[1:]) / min(flat[1:]) < 1.5  # evenly: every level well under 5%
    assert obf.scaled(obf.two_sided(3) * 0.999, 3) < 0.05 <= obf.scaled(obf.two_sided(3) * 1.001, 3)
    assert Boundary((3, 4, 5)).two_sided(0) == Boundary((3, 4, 5)).two_sided(0)  # deterministic
    assert set(SPENDING) == {"pocock", "obrien_fleming"}


def test_looking_after_every_seed_inflates_the_level_and_the_boundary_does_not():
    # 3,000 draws: one SE is 0.4% at 5%. Testing at 5% at every look from 3 to 8 seeds and stopping at the first
    # verdict calls ~11% of null pairs different (optional stopping); the boundary keeps 5% on normal differences
    # (where its simulation is exact) and on the chance collapses (where the fixed test is conservative).
    rates = simulate_sequential(3000, (3, 4, 5, 6, 7, 8), dists=("normal", "chance_mix"), family=False)
    naive = rates["naive_every_look"]
    assert naive["false_differs"]["normal"] > 0.08 and naive["false_same"]["normal"] > 0.06
    for rule in ("sequential_obrien_fleming", "sequential_pocock"):
        for measure in ("false_differs", "false_same"):
            for dist in ("normal", "chance_mix"):
                assert rates[rule][measure][dist] < 0.05 + 3 * np.sqrt(0.05 * 0.95 / 3000), (rule, measure, dist)
        assert rates[rule]["mean_seeds_1sd"]["normal"] < 8  # it stops early some of the time
    assert rates["sequential_obrien_fleming"]["power"]["normal"] > 0.5 * rates["fixed_8"]["power"]["normal"]


def cells(values: dict[str, list[float]], task: str = "k_back", metric: str = "ood_beyond_acc") -> list[CellResult]:
    # written as an old (keyless) cell file is: the reader's migration fills every field since with null
    return [parse_cell({"cell_id": f"{task}_{pe}_s{s}", "task": task, "pe": pe, "seed": s, "axes": {}, metric: v,
                        "id_acc": 1.0, "ood_acc": v, "id_loss": 1.0, "ood_loss": 2.0})
            for pe, vs in values.items() for s, v in enumerate(vs)]


# rope far above both (decided at the first look); learned vs alibi within a few points, noisy: never decided
VALUES = {"rope": [0.90, 0.91, 0.92, 0.90, 0.91], "learned": [0.40, 0.45, 0.42, 0.47, 0.41],
          "alibi": [0.44, 0.41, 0.46, 0.42, 0.45]}


def test_a_row_stops_when_its_relations_are_decided_and_its_verdicts_are_kept(tmp_path):
    s = study(tmp_path)
    rows = rows_of(expand(s))
    first = replay(s, cells({pe: v[:3] for pe, v in VALUES.items()}), rows)
    # at 3 seeds rope's two pairs are decided (+48 points, spread 1); learned vs alibi is not: those rows want seed 3
    assert first.pairs[("k_back", (), "learned", "rope")].state == "<"
    assert first.pairs[("k_back", (), "learned", "rope")].seeds == 3
    assert first.pairs[("k_back", (), "alibi", "learned")].state == "?"
    assert first.why[("k_back", "rope", ())] == "every relation it takes part in decided by 3 seeds"
    assert first.wants == {("k_back", "learned", ()): 4, ("k_back", "alibi", ()): 4}
    assert sorted(c.cell_id for c in wanted(expand(s), first)) == [f"k_back_{pe}_s{i}" for pe in ("alibi", "learned")
                                                                    for i in range(4)]
    # the cells a sequential run would hold: rope at 3 seeds, the other two at 5 (max)
    held = cells({"rope": VALUES["rope"][:3], "learned": VALUES["learned"], "alibi": VALUES["alibi"]})
    done = replay(s, held, rows)
    assert done.finished and done.looks_done == 3
    assert done.seeds == {("k_back", "rope", ()): 3, ("k_back", "learned", ()): 5, ("k_back", "alibi", ()): 5}
    assert done.why[("k_back", "learned", ())] == "reached max (5 seeds) with 1 undecided: alibi vs learned"
    assert done.pair("k_back", (), "rope", "learned").state == ">"  # oriented as asked
    assert done.pair("k_back", (), "rope", "alibi").seeds == 3
    assert sorted(c.cell_id for c in used(expand(s), done)) == sorted(c.cell_id for c in held)


def test_an_undecided_claim_keeps_its_rows_running(tmp_path):
    # every pair is decided at 3 seeds on the table's metric, but the claim on id_acc is not: its two rows go on
    s = study(tmp_path, extra="claims: [{order: 'learned > alibi', metric: id_acc}]\n")
    data = cells({"rope": [0.9, 0.93, 0.91], "learned": [0.1, 0.11, 0.12], "alibi": [0.5, 0.52, 0.51]})
    data = [dataclasses.replace(c, id_acc={"rope": 0.9, "learned": 0.5 + 0.01 * (c.seed % 2), "alibi": 0.5}[c.pe]
                                + 0.003 * c.seed) for c in data]
    rep = replay(s, data, rows_of(expand(s)))
    assert all(v.seeds == 3 for v in rep.pairs.values())
    assert rep.wants == {("k_back", "learned", ()): 4, ("k_back", "alibi", ()): 4}
    assert rep.relations[("learned > alibi", "k_back", 0)].state == "?"


def test_compare_treats_a_sequential_run_like_a_fixed_one(tmp_path):
    s = study(tmp_path)
    seq_cells = cells({"rope": VALUES["rope"][:3], "learned": VALUES["learned"], "alibi": VALUES["alibi"]})
    looks = record(replay(s, seq_cells, rows_of(expand(s))), s.sequential)
    fixed = cells(VALUES)  # every row at 5 seeds
    ag = compare(seq_cells, fixed, looks=(looks, None))
    assert ag.cells == [] and ag.pairs == 3 and ag.same_conclusions  # rows match; rope's 3 seeds are its rule's choice
    # without the record the same cells read as a fixed run with cells missing: not the same conclusions
    assert not compare(seq_cells, fixed).same_conclusions
    flipped = json.loads(json.dumps(looks))
    for p in flipped["pairs"]:
        p["verdict"] = {"<": ">", ">": "<"}.get(p["verdict"], p["verdict"])
    assert compare(seq_cells, fixed, looks=(flipped, None)).contradictions  # its verdicts are the ones read


@pytest.mark.slow  # essential: the only test that trains a sequential study's cells (about 20 s on one core)
def test_a_sequential_study_runs_end_to_end_resumes_and_compares(tmp_path, capsys):
    from posbench.cli.study import main as study_main
    from scripts.compare_studies import main as compare_main

    spec = tmp_path / "seq.yaml"
    spec.write_text(SPEC.replace("SEEDS", "[0]").replace("pes: [{name: rope}, {name: learned}, {name: alibi}]",
                                                        "pes: [{name: rope}, {name: learned}]"))
    out = tmp_path / "out"
    argv = [str(spec), "--out", str(out), "--no-progress", "--sequential-seeds", "3:4"]
    assert study_main(argv) == 0
    data = json.loads((out / "results.json").read_text())
    counts = {pe: sum(c["pe"] == pe for c in data["cells"]) for pe in ("rope", "learned")}
    assert set(counts.values()) <= {3, 4} and data["sequential"]["seeds"]["max"] == 4
    report = (out / "report.md").read_text()
    assert "## Sequential seeds" in report and "O'Brien-Fleming-type spending (Lan & DeMets 1983) over looks at 3, 4" \
        in report
    assert "at the sequential boundary (Lan-DeMets O'Brien-Fleming" in report  # the verdict line names it
    assert f"| k_back | rope | {counts['rope']} |" in report
    before = report
    capsys.readouterr()
    assert study_main(argv) == 0 and "(0 run now)" in capsys.readouterr().out  # every cell reused
    assert (out / "report.md").read_text() == before
    seq = tmp_path / "seq_results.json"
    shutil.copy(out / "results.json", seq)
    assert study_main([str(spec), "--out", str(out), "--no-progress", "--report-only", "--seeds",
                       *map(str, range(min(counts.values())))]) == 0
    assert compare_main([str(seq), str(out)]) == 0 and "same conclusions" in capsys.readouterr().out


def test_the_quickstart_looks_as_a_run_would_and_decides_what_5_fixed_seeds_do(tmp_path):
    # the committed 5-seed quickstart cells, as a study folder's cell files: the runner's looks (report-only: nothing
    # trains) pick 93 cells, rows stopping at 4 or 5 seeds, and reach the verdicts of 5 fixed seeds on all 40 pairs
    from posbench.studies.study_runner import _sequential

    committed = json.loads((ROOT / "results" / "quickstart" / "cells.json").read_text())
    (tmp_path / "cells").mkdir()
    for c in committed:
        (tmp_path / "cells" / f"{c['cell_id']}.json").write_text(json.dumps(c))
    s = load_study("quickstart")
    assert s.sequential == SequentialSeeds(3, 5, 1, "obrien_fleming")
    chosen, trained = _sequential(s, expand(s), tmp_path, 1, False, False, lambda line: None, report_only=True)
    assert trained == [] and len(chosen) == 93
    ids = {c.cell_id for c in chosen}
    committed = [parse_cell(c) for c in committed]
    mine = [c for c in committed if c.cell_id in ids]
    looks = record(replay(s, mine, rows_of(expand(s))), s.sequential)
    assert sorted(r["seeds"] for r in looks["rows"]) == [4] * 7 + [5] * 13  # 7 rows decided by 4 seeds
    head = [p for p in looks["pairs"] if "rope" in (p["a"], p["b"]) and p["task"] != "modular_sum"]
    assert len(head) == 12 and sum(p["verdict"] != "?" for p in head) == 10
    ag = compare(mine, committed, looks=(looks, None))
    assert ag.pairs == 40 and ag.same == 40 and ag.same_conclusions


def test_the_report_names_the_boundary_on_every_verdict_line_and_says_why_each_row_stopped(tmp_path):
    from posbench.studies.study_report import claims_part, comparisons

    s = study(tmp_path, extra="claims: [{order: 'rope > learned'}]\n")
    held = cells({"rope": VALUES["rope"][:3], "learned": VALUES["learned"], "alibi": VALUES["alibi"]})
    rep = replay(s, held, rows_of(expand(s)))
    line = comparisons(held, s, rep=rep)
    assert "(Holm over 3 pairs at the sequential boundary (Lan-DeMets O'Brien-Fleming-type spending" in line
    assert "inconclusive: alibi vs learned" in line or "inconclusive: learned vs alibi" in line
    claims = "\n".join(claims_part(held, s, rep))
    assert "**Verdict (k_back, at the sequential boundary (Lan-DeMets O'Brien-Fleming" in claims
    assert "reproduced" in claims
    from posbench.studies import report_tex
    from posbench.studies.study_report import by_group

    tex = report_tex.verdicts(by_group(held, "ood_beyond_acc"), 0.95, 200, 0.02,
                              lambda t, x, a, b: rep.pair(t, x, a, b).state)
    assert {(v["a"], v["b"], v["verdict"]) for v in tex if v["relation"] == ">"} == {("rope", "learned", "ordered"),
                                                                                      ("rope", "alibi", "ordered")}
    # the looks' verdicts are the ones shown, not the fixed test's on the same seeds (which orders rope's pairs)
    undecided = report_tex.verdicts(by_group(held, "ood_beyond_acc"), 0.95, 200, 0.02, lambda t, x, a, b: "?")
    assert {v["verdict"] for v in undecided} == {"inconclusive"}
    text = "\n".join(section(rep, s))
    assert "Looks made: 3 of 3 (3, 4, 5 seeds)." in text
    assert "| k_back | rope | 3 | every relation it takes part in decided by 3 seeds |" in text
    assert "| k_back | learned | 5 | reached max (5 seeds) with 1 undecided: alibi vs learned |" in text


def test_a_published_sequential_result_shows_and_compares_the_verdicts_of_its_looks(tmp_path, capsys):
    # the published form (studies/published.py) keeps cells and spec only: its page and a comparison replay the
    # looks from them, so they give the report's sequential verdicts, not the fixed test's on the seeds each row got
    from posbench.studies.published import Result, page, write_result
    from posbench.studies.study_compare import read_published
    from scripts.compare_studies import main as compare_main

    s = study(tmp_path, extra="claims: [{order: 'rope > learned'}]\n")
    held = [dataclasses.replace(c, chance=0.25) for c in
            cells({"rope": VALUES["rope"][:3], "learned": VALUES["learned"], "alibi": VALUES["alibi"]})]
    folder = write_result(tmp_path / "out", held, s, "posbench study seq.yaml", 1.0, 1.0)
    want = record(replay(s, held, rows_of(expand(s))), s.sequential)
    cells_back, looks = read_published(folder)
    assert looks == want and [c.cell_id for c in cells_back] == [c.cell_id for c in held]
    text = page(Result(folder))
    assert "## Sequential seeds" in text and "| k_back | rope | 3 | every relation it takes part in decided" in text
    assert "Holm over 3 pairs at the sequential boundary (Lan-DeMets O'Brien-Fleming" in text
    assert "3-5 per row" in text  # the setting line counts each row's seeds, not one fixed count
    # the same cells, published with the spec's seeds fixed, read as a fixed run with rope's cells missing
    fixed = write_result(tmp_path / "fixed", held, dataclasses.replace(s, sequential=None, seeds=[0, 1, 2, 3, 4]),
                         "posbench study seq.yaml", 1.0, 1.0)
    assert read_published(fixed)[1] is None
    capsys.readouterr()
    assert compare_main([str(folder), str(folder)]) == 0 and "same conclusions" in capsys.readouterr().out
    assert "## Sequential seeds" not in page(Result(fixed))
