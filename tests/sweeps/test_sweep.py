"""Sweeps end to end on generated text: real tokenize with a task mix, real training and evaluation through
scripts/sweep.py as a subprocess, a SIGKILL mid-sweep, the emitted torchrun/slurm launchers, bad input."""

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from posbench.config import load_config
from posbench.data.tokenize_shards import tokenize

ROOT = Path(__file__).resolve().parents[2]
WORDS = "the of and to in is was for on that with as by at from it an be this are".split()
DATA = {"source": None, "tokenizer": {"name": "bytes"},
        "splits": {"val": {"start": 0, "stop": 1}, "filler": {"start": 1, "stop": 2},
                   "train": {"start": 2, "stop": None}},
        "mix": {"ratio": 0.15, "tasks": [{"name": "simple_copy"}, {"name": "sort"}]}}


def make_data(tmp_path: Path, mix: dict | None = None) -> dict:
    corpus = tmp_path / "corpus"
    if not corpus.exists():
        corpus.mkdir()
        rng = random.Random(0)
        for f in range(4):
            lines = [json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))})
                     for _ in range(150)]
            (corpus / f"part{f}.jsonl").write_text("\n".join(lines) + "\n")
    data = json.loads(json.dumps(DATA))
    data["source"] = {"name": "local", "paths": [f"{corpus}/*.jsonl"], "tag": "gen"}
    data["root"] = str(tmp_path / "data")
    if mix is not None:
        data["mix"] = mix
    tokenize(load_config(overrides=[f"data={json.dumps(data)}"]).data, log=lambda *_: None)
    return data


def sweep_yaml(tmp_path: Path, data: dict, **extra) -> Path:
    spec = {"name": "t", "sizes": ["nano"], "pes": [{"name": "rope"}, {"name": "alibi"}], "seeds": [0],
            "run": {"model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64},
                    "data": data, "train": {"budget_unit": "tokens", "target_budgets": [16384],
                                            "global_batch_tokens": 1024, "micro_batch": 16, "log_interval": 2,
                                            "eval_interval": 8, "eval_batches": 2, "ckpt_interval": 2,
                                            "device": "cpu"},
                    "logging": {"wandb": "disabled"}},
            "eval": {"suites": ["ppl", "algorithmic"], "lengths": [32, 64, 128], "device": "cpu",
                     "ppl": {"protocols": ["nonoverlap"], "max_tokens": 2048},
                     "algorithmic": {"n_examples": 4, "shots": [0]}},
            "n_boot": 200}
    spec.update(extra)
    path = tmp_path / f"sweep_{len(list(tmp_path.glob('sweep_*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def sweep(*args, **kw):
    return subprocess.Popen([sys.executable, str(ROOT / "scripts" / "sweep.py"), *map(str, args), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.mark.slow
def test_two_run_sweep_end_to_end_and_a_killed_sweep_gives_the_same_report(tmp_path):
    data = make_data(tmp_path)
    spec = sweep_yaml(tmp_path, data)
    code, out, err = finish(sweep(spec, "--out", tmp_path / "clean"))
    assert code == 0, err
    clean = tmp_path / "clean"
    report = (clean / "report.md").read_text()
    assert "| nano 16.4K | rope |" in report and "| nano 16.4K | alibi |" in report
    assert "simple_copy ID 0-shot" in report and "sort OOD 0-shot" in report and "## Perplexity" in report
    assert "15% of train tokens (simple_copy, sort)" in report
    rows = (clean / "results.csv").read_text().splitlines()
    assert rows[0].startswith("table,runs,pe,column") and any(r.startswith("ppl,nano 16.4K,alibi,128,") for r in rows)
    assert sorted(p.name for p in (clean / "done").iterdir()) == ["nano_alibi_s0.json", "nano_rope_s0.json"]
    assert {p.name for p in (clean / "plots").iterdir()} >= {"loss_vs_tokens.png", "ppl_vs_length.png",
                                                               "task_accuracy.png"}
    assert "tokens/s" in (clean / "throughput.md").read_text()
    # the second run of the grid is killed after its first checkpoint; a re-run resumes it
    killed = tmp_path / "killed"
    proc = sweep(spec, "--out", killed)
    deadline = time.time() + 240
    while not list((killed / "checkpoints" / "nano_alibi_s0").glob("step_*")):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "report.md").exists() and not (killed / "done" / "nano_alibi_s0.json").exists()
    code, out, err = finish(sweep(spec, "--out", killed))
    assert code == 0, err
    assert (killed / "report.md").read_bytes() == (clean / "report.md").read_bytes()
    assert (killed / "results.csv").read_bytes() == (clean / "results.csv").read_bytes()
    # a third run trains and evaluates nothing, in parallel mode too
    code, out, err = finish(sweep(spec, "--out", killed, "--workers", "2"))
    assert code == 0 and "training" not in out + err and "evaluating" not in out + err and "processes" not in out
    # two runs at a time, one process each: the same numbers (thread counts may differ: float tolerance),
    # each run's training and evaluation output in its own log
    parallel = tmp_path / "parallel"
    code, out, err = finish(sweep(spec, "--out", parallel, "--workers", "2", "--prepare-data"))
    assert code == 0, err
    assert "2 runs (with their branches) in 2 processes" in out
    assert "measured    task mix" in out and "simple_copy" in out  # --prepare-data: shards (already there) + info
    assert sorted(p.name for p in (parallel / "done").iterdir()) == ["nano_alibi_s0.json", "nano_rope_s0.json"]
    for name in ("nano_alibi_s0", "nano_rope_s0"):
        assert "saved final checkpoint" in (parallel / "logs" / f"{name}.log").read_text()
        assert (parallel / "logs" / "eval" / f"{name}.log").is_file()
    texts, numbers = csv_values(parallel)
    clean_texts, clean_numbers = csv_values(clean)
    assert texts == clean_texts and numbers == pytest.approx(clean_numbers, rel=1e-3, abs=1e-3, nan_ok=True)


def csv_values(out_dir: Path) -> tuple[list[str], list[float]]:
    """results.csv's text cells and its numeric cells apart (runs may differ in float rounding only)."""
    texts, numbers = [], []
    for row in (out_dir / "results.csv").read_text().splitlines():
        for v in row.split(","):
            try:
                numbers.append(float(v))
            except ValueError:
                texts.append(v)
    return texts, numbers


def test_emit_slurm_and_torchrun(tmp_path):
    data = {**DATA, "source": {"name": "local", "paths": ["corpus/*.jsonl"]}}
    spec = sweep_yaml(tmp_path, data, seeds=[0, 1])
    spec_data = yaml.safe_load(spec.read_text())
    spec_data["run"]["train"]["target_budgets"] = [8192, 16384]  # a WSD branch per run
    spec.write_text(yaml.safe_dump(spec_data))
    code, out, err = finish(sweep(spec, "--out", tmp_path / "out", "--emit", "slurm"))
    assert code == 0, err
    script = (tmp_path / "out" / "sweep.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "out" / "sweep.sbatch")]).returncode == 0
    assert "#SBATCH --array=0-3" in script  # 2 PEs x 2 seeds main runs
    chains = script.split("CHAINS=(\n")[1].split("\n)\n")[0].splitlines()
    assert len(chains) == 4 and all(len(c.strip().strip('"').split()) == 2 for c in chains)  # main, then branch
    for flag in ("--rdzv-backend=c10d", '--rdzv-endpoint="$HEAD:$PORT"', '--nnodes="$SLURM_NNODES"',
                 "--max-restarts=", "srun --ntasks-per-node=1 torchrun"):
        assert flag in script
    main_cfg, branch_cfg = chains[0].strip().strip('"').split()
    cfg = load_config([main_cfg])  # train.py's own loader reads the emitted configs
    assert cfg.train.run_name == "nano_rope_s0" and cfg.train.resume == "auto" and cfg.pe.name == "rope"
    branch = load_config([branch_cfg])
    assert branch.train.branch_from.endswith("checkpoints/nano_rope_s0/branch_8.19K") and branch.train.budget == 8192
    assert not (tmp_path / "out" / "checkpoints").exists()  # nothing trained
    code, out, err = finish(sweep(spec, "--out", tmp_path / "out", "--emit", "torchrun"))
    assert code == 0, err
    launch = tmp_path / "out" / "launch_torchrun.sh"
    assert subprocess.run(["bash", "-n", str(launch)]).returncode == 0
    lines = [x for x in launch.read_text().splitlines() if "torchrun --standalone" in x]
    assert len(lines) == 8 and all("--max-restarts" in x and "train.py" in x for x in lines)
    code, out, err = finish(sweep(spec, "--out", tmp_path / "out", "--report-only"))
    assert code == 2 and "are not finished" in err


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["run"]["model"].update(d_modle=3), "did you mean `d_model`"),
    (lambda s: s.update(seedz=[1]), "did you mean `seeds`"),
    (lambda s: s.update(pes=[{"name": "ropee"}]), "did you mean `rope`"),
    (lambda s: s.update(sizes=["tinyy"]), "did you mean `tiny`"),
    (lambda s: s["run"]["train"].update(global_batch_tokens=1000), "not divisible"),
])
def test_bad_sweep_config_stops_before_any_work(tmp_path, edit, message):
    spec = sweep_yaml(tmp_path, {**DATA, "source": {"name": "local", "paths": ["corpus/*.jsonl"]}})
    data = yaml.safe_load(spec.read_text())
    edit(data)
    spec.write_text(yaml.safe_dump(data))
    code, out, err = finish(sweep(spec, "--out", tmp_path / "out"))
    assert code == 2 and message in err, err
    assert not (tmp_path / "out").exists()


def test_shards_of_another_mix_stop_the_sweep_naming_both(tmp_path):
    data = make_data(tmp_path)  # shards with the default test mix
    other = {**data, "mix": {"ratio": 0.3, "tasks": [{"name": "reverse"}]}}
    code, out, err = finish(sweep(sweep_yaml(tmp_path, other), "--out", tmp_path / "out"))
    assert code == 2 and err.startswith("error: "), err
    made = next((tmp_path / "data" / "tokens" / "gen").iterdir()).name
    assert "no token shards for this sweep's data" in err and made in err and "bytes_mix-" in err.split(made)[0]
    assert not (tmp_path / "out" / "checkpoints").exists()
