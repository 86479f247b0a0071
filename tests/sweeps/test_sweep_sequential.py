"""Sequential seeds in a sweep (sweeps/sweep_sequential.py over studies/sequential.judge_looks): the looks on
made-up per-seed values with hand-derived answers, the report's account of them, the refusals and the plan said
before any work, and one sequential sweep trained end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from posbench.cli.sweep import main as sweep_main
from posbench.errors import ConfigError, DataError
from posbench.studies.sequential import SequentialSeeds
from posbench.sweeps import sweep_sequential as ss
from posbench.sweeps.sweep_report import write_report
from posbench.sweeps.sweep_runner import run_sweep
from posbench.sweeps.sweep_spec import load_sweep, plan_runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_sweep import make_data, sweep_yaml  # noqa: E402

RUN = {"model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64},
       "data": {"tokenizer": {"name": "bytes"}},
       "train": {"budget_unit": "tokens", "target_budgets": [16384], "global_batch_tokens": 1024, "micro_batch": 16}}
CLAIM = {"order": "rope > alibi > none", "metric": "first_token_mass"}


def spec(tmp_path: Path, **extra) -> Path:
    body = {"name": "t", "sizes": ["nano"], "pes": [{"name": "rope"}, {"name": "alibi"}, {"name": "none"}],
            "seeds": {"start": 3, "max": 5}, "run": RUN, "eval": {"suites": ["first_token"]}, "claims": [CLAIM],
            "n_boot": 200, **extra}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


# first-token mass at the training length, per seed. rope - alibi: 0.25, 0.258, 0.271 at 3 seeds, t = 42 on 2 df,
# two-sided p 5.6e-4, 1.1e-3 after Holm over the claim's two relations: under the first look's level of
# O'Brien-Fleming-type spending over 3, 4, 5 seeds (two-sided 0.8%), so `rope > alibi` is shown at the first look.
# alibi - none: +0.01, -0.01, +0.005, -0.005, 0: a mean of 0 (or near it) never shows nor refutes `alibi > none`.
MASS = {"rope": [0.30, 0.31, 0.32, 0.30, 0.31], "alibi": [0.05, 0.052, 0.049, 0.051, 0.05]}
MASS["none"] = [a - d for a, d in zip(MASS["alibi"], [0.01, -0.01, 0.005, -0.005, 0.0])]


def results_of(runs, seeds: dict[str, int]) -> dict[str, dict]:
    """Each run's first_token suite (its mass at the 64-token training length) for the first seeds[pe] seeds."""
    return {r.name: {"suites": {"first_token": {"rows": [{"length": 64, "mean": MASS[r.pe][r.seed]}]}}}
            for r in runs if r.seed < seeds[r.pe]}


def test_a_decided_row_stops_an_undecided_one_gets_another_seed_and_max_stops_it(tmp_path):
    sweep = load_sweep(str(spec(tmp_path)))
    assert sweep.sequential == SequentialSeeds(3, 5, 1) and sweep.seeds == [0, 1, 2, 3, 4]
    runs = plan_runs(sweep, tmp_path / "out")
    assert len(runs) == 15  # every run a row may reach
    rows = ss.rows_of(runs)
    rope, alibi, none = (("nano", pe, ()) for pe in ("rope", "alibi", "none"))
    assert rows == [rope, alibi, none]
    assert ss.replay(sweep, runs, {}, rows).wants == {rope: 3, alibi: 3, none: 3}  # nothing yet: the first look

    first = ss.replay(sweep, runs, results_of(runs, {"rope": 3, "alibi": 3, "none": 3}), rows)
    assert first.boundary.two_sided(0) > 1.2e-3  # the level the derivation above reads
    shown, open_ = (first.relations[(CLAIM["order"], "nano 16.4K", i)] for i in (0, 1))
    assert (shown.state, shown.seeds) == ("shown", 3) and open_.state == "?"
    assert first.why == {rope: "every relation it takes part in decided by 3 seeds"}
    assert first.wants == {alibi: 4, none: 4}
    assert sorted(r.name for r in ss.wanted(runs, first)) == [f"nano_{pe}_s{s}" for pe in ("alibi", "none")
                                                               for s in range(4)]

    done = ss.replay(sweep, runs, results_of(runs, {"rope": 3, "alibi": 5, "none": 5}), rows)
    assert done.finished and done.looks_done == 3 and done.seeds == {rope: 3, alibi: 5, none: 5}
    assert done.relations[(CLAIM["order"], "nano 16.4K", 0)].seeds == 3  # kept from the look that decided it
    held = "reached max (5 seeds) with 1 undecided: claim `rope > alibi > none` (alibi vs none)"
    assert done.why[alibi] == held and done.why[none] == held
    assert [r.name for r in ss.used(runs, done) if r.pe == "rope"] == [f"nano_rope_s{s}" for s in range(3)]

    # the report: the rule, the looks, each row's seeds and why it stopped; the verdict line names the boundary
    out = tmp_path / "out"
    out.mkdir()
    chosen = ss.used(runs, done)
    report = write_report(sweep, chosen, results_of(chosen, {"rope": 3, "alibi": 5, "none": 5}), out, [], rep=done)
    assert "13 runs: sizes nano; PEs rope, alibi, none; sequential seeds 3:5:1 (start:max:step; 3-5 per row" in report
    assert "## Sequential seeds" in report and "Looks made: 3 of 3 (3, 4, 5 seeds)." in report
    assert "the judges test every relation of the sweep's claims in every run group" in report
    assert "| size | row | seeds | why it stopped |" in report
    assert "| nano | rope | 3 | every relation it takes part in decided by 3 seeds |" in report
    assert f"| nano | none | 5 | {held} |" in report
    assert "**Verdict (nano 16.4K, at the sequential boundary (Lan-DeMets O'Brien-Fleming" in report
    assert "each row's seeds" in report  # the intervals' label: rows have their own seed counts


def test_a_fixed_list_is_not_sequential_and_the_plan_stays_as_it_was(tmp_path):
    sweep = load_sweep(str(spec(tmp_path, seeds=[0, 1])))
    assert sweep.sequential is None and [r.name for r in plan_runs(sweep, tmp_path / "out")] == [
        f"nano_{pe}_s{s}" for pe in ("rope", "alibi", "none") for s in (0, 1)]


@pytest.mark.parametrize("extra, says", [
    ({"claims": []}, "sweep.seeds {start, max, step}: sequential seeds give a row more seeds while a claim"),
    ({"seeds": {"start": 2, "max": 5}}, "seeds.start is 2: sequential seeds start at >= 3"),
    ({"seeds": {"start": 3, "max": 5, "stop": 4}}, "unknown config key `sweep.seeds.stop`"),
])
def test_a_sequential_sweep_that_cannot_decide_is_refused_in_one_line(tmp_path, extra, says):
    with pytest.raises(ConfigError) as e:
        load_sweep(str(spec(tmp_path, **extra)))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_command_takes_sequential_seeds_and_refuses_what_cannot_run(tmp_path, capsys):
    fixed = spec(tmp_path, seeds=[0])
    out = tmp_path / "out"
    assert sweep_main([str(fixed), "--out", str(out), "--sequential-seeds", "2:5"]) == 2
    assert "seeds.start is 2" in capsys.readouterr().err
    assert sweep_main([str(fixed), "--out", str(out), "--sequential-seeds", "3:5", "--emit", "slurm"]) == 2
    assert "--emit writes every run at once, and sequential seeds (3:5:1)" in capsys.readouterr().err
    no_claims = spec(tmp_path, seeds=[0], claims=[])
    assert sweep_main([str(no_claims), "--out", str(out), "--sequential-seeds", "3:5"]) == 2
    assert "this sweep has no `claims`" in capsys.readouterr().err
    assert not out.exists()  # refused before any work


def test_the_plan_is_said_before_any_work_and_report_only_names_the_runs_the_first_look_wants(tmp_path):
    sweep = load_sweep(str(spec(tmp_path)))
    seen = []
    with pytest.raises(DataError) as e:
        run_sweep(sweep, tmp_path / "out", report_only=True, progress=False, log=seen.append)
    assert seen == ["sequential seeds 3:5:1 (start:max:step): the first look needs 9 runs, 3 rows x 3 seeds; a row "
                    "undecided at every look reaches 5 seeds: at most 15 runs over 3 looks"]
    assert str(e.value) == ("9 runs are not finished (nano_rope_s0, nano_rope_s1, nano_rope_s2, nano_alibi_s0, "
                            "nano_alibi_s1, ...; look 1 of the sequential seeds wants them): run them first")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # essential: the only test that trains a sequential sweep's runs
def test_a_sequential_sweep_trains_only_the_undecided_rows_and_resumes(tmp_path, capsys):
    # `twin` is rope under another label: the same runs, so `rope > twin` has differences of exactly 0 and is never
    # decided (both rows reach max); alibi is in no claim, so it stops at the first look
    data = make_data(tmp_path)
    body = yaml.safe_load(sweep_yaml(tmp_path, data).read_text())
    body["run"]["train"].update(target_budgets=[4096], eval_interval=4, ckpt_interval=4)
    path = sweep_yaml(tmp_path, data, arms=[{"label": "twin", "pe": {"name": "rope"}}], run=body["run"],
                      claims=[{"order": "rope > twin", "metric": "ppl_slope"}],
                      eval={"suites": ["ppl"], "lengths": [64, 128], "device": "cpu",
                            "ppl": {"protocols": ["nonoverlap"], "max_tokens": 512}})
    out = tmp_path / "out"
    argv = [str(path), "--out", str(out), "--no-progress", "--sequential-seeds", "3:4"]
    assert sweep_main(argv) == 0
    said = capsys.readouterr().out
    assert "the first look needs 9 runs, 3 rows x 3 seeds" in said and "estimate: this look, 9 runs" in said
    assert "look 1 (3 seeds): 2 of 3 rows undecided get more seeds" in said
    assert sorted(p.stem for p in (out / "done").iterdir()) == sorted(
        [f"nano_alibi_s{s}" for s in range(3)] + [f"nano_{pe}_s{s}" for pe in ("rope", "twin") for s in range(4)])
    report = (out / "report.md").read_text()
    assert "11 runs: sizes nano; PEs rope, alibi, twin; sequential seeds 3:4:1" in report
    assert "| nano | alibi | 3 | every relation it takes part in decided by 3 seeds |" in report
    assert "| nano | twin | 4 | reached max (4 seeds) with 1 undecided: claim `rope > twin` (rope vs twin) |" in report
    before = report
    assert sweep_main(argv) == 0  # every run and evaluation reused: the same looks, the same report
    assert "training" not in capsys.readouterr().out and (out / "report.md").read_text() == before
