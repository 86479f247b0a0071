"""Real multi-process runs: torchrun, gloo backend, 2 CPU processes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.training.helpers import losses

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COMMON = ["--model-size", "nano", "model.seq_len=64", "train.stream=random", "train.budget_unit=tokens",
          "train.target_budgets=[8192,16384]", "train.global_batch_tokens=512", "train.micro_batch=2",
          "train.log_interval=1", "train.eval_interval=0", "train.ckpt_interval=4", "logging.wandb=disabled",
          "schedule.warmup_tokens=1024", "model.dropout=0.0", "optim.lr=3e-3"]


def env(**extra):
    e = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", **extra}
    e.pop("POSBENCH_INJECT_NAN", None)
    return {**e, **extra}


def torchrun(nproc, args, max_restarts=0, **kw):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           f"--max-restarts={max_restarts}", "--monitor-interval=0.5", str(ROOT / "train.py"), *COMMON, *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)


def run(nproc, args, timeout=240, **envs):
    p = torchrun(nproc, args, env=env(**envs))
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out


def single(args):
    cmd = [sys.executable, str(ROOT / "train.py"), *COMMON, *args]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env(), timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr


def children(pid):
    """Descendant pids of pid, from /proc."""
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def wait_for_step(run_dir, step, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (run_dir / "metrics.jsonl").is_file() and max(losses(run_dir), default=0) >= step:
            return
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    raise TimeoutError(f"{run_dir} did not reach step {step}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted 2-process run and 1-process run with the same global batch."""
    out = tmp_path_factory.mktemp("ref")
    rc, log = run(2, [f"train.out_dir={out}", "train.run_name=ddp"])
    assert rc == 0, log
    single([f"train.out_dir={out}", "train.run_name=one"])
    return out


def test_ddp_two_processes_match_one_process(reference):
    two, one = losses(reference / "ddp"), losses(reference / "one")
    assert sorted(two) == sorted(one) == list(range(1, 33))
    for s in one:
        assert two[s] == pytest.approx(one[s], rel=1e-5, abs=1e-5)


REPO = ["pe.name=repo", "pe.rope_until=0.5", "train.target_budgets=[4096]"]


@pytest.fixture(scope="module")
def repo_one(tmp_path_factory):
    """RePo's two stages in one process: the metrics rows the multi-process runs must equal."""
    out = tmp_path_factory.mktemp("repo")
    single([*REPO, f"train.out_dir={out}", "train.run_name=one"])
    return rows(out / "one")


def rows(run_dir) -> dict[int, dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if "loss" in r}


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_repo_two_stage_whose_networks_are_unused_before_the_switch_matches_one_process(repo_one, parallel, tmp_path):
    """RePo with pe.rope_until keeps its networks outside the forward until the switch. DDP is told to look for
    unused parameters (without it the second step fails). Under FSDP2 the PE's parameters are shards: the metrics
    row gathers each before logging it (a DTensor reshape failed there before), so every pe/ value is the whole
    parameter's, as one process logs it. Losses and PE values match one process across the switch."""
    rc, log = run(2, [*REPO, f"train.out_dir={tmp_path}", f"train.run_name={parallel}", f"train.parallel={parallel}"])
    assert rc == 0 and "switched the PE at 2,048 tokens" in log, log
    two = rows(tmp_path / parallel)
    assert sorted(two) == sorted(repo_one) == list(range(1, 9))
    pe_keys = [k for k in repo_one[1] if k.startswith("pe/")]
    assert pe_keys
    for s, one in repo_one.items():
        for k in ["loss", *pe_keys]:
            assert two[s][k] == pytest.approx(one[k], rel=1e-5, abs=1e-5), (s, k)


def test_fsdp2_two_processes_match_one_process(reference, tmp_path):
    rc, log = run(2, [f"train.out_dir={tmp_path}", "train.run_name=fsdp", "train.parallel=fsdp"])
    assert rc == 0, log
    fsdp, one = losses(tmp_path / "fsdp"), losses(reference / "one")
    for s in one:
        assert fsdp[s] == pytest.approx(one[s], rel=1e-5, abs=1e-5)


def test_kill_9_of_one_rank_restarts_and_resumes_exactly(reference, tmp_path):
    p = torchrun(2, [f"train.out_dir={tmp_path}", "train.run_name=killed"], max_restarts=1, env=env())
    run_dir = tmp_path / "killed"
    wait_for_step(run_dir, 10, p)  # past the step-8 checkpoint
    workers = [c for c in children(p.pid) if "train.py" in Path(f"/proc/{c}/cmdline").read_text()]
    os.kill(workers[-1], signal.SIGKILL)
    out, _ = p.communicate(timeout=240)
    assert p.returncode == 0, out
    assert "resumed from" in out
    got, ref = losses(run_dir), losses(reference / "ddp")
    assert sorted(got) == sorted(ref)
    assert all(got[s] == ref[s] for s in ref), "losses after a kill -9 restart must be bit-identical"


def test_sigterm_to_launcher_saves_and_resume_is_exact(reference, tmp_path):
    p = torchrun(2, [f"train.out_dir={tmp_path}", "train.run_name=term"], env=env())
    run_dir = tmp_path / "term"
    wait_for_step(run_dir, 5, p)
    os.kill(p.pid, signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    latest = json.loads((run_dir / "latest" / "meta.json").read_text())
    assert latest["kind"] == "signal", out
    assert latest["step"] < 32
    rc, log = run(2, [f"train.out_dir={tmp_path}", "train.run_name=term", "--resume", "auto"])
    assert rc == 0, log
    got, ref = losses(run_dir), losses(reference / "ddp")
    assert all(got[s] == ref[s] for s in ref)


def test_nan_on_one_rank_stops_all_ranks_before_the_update(tmp_path):
    rc, out = run(2, [f"train.out_dir={tmp_path}", "train.run_name=nan"], POSBENCH_INJECT_NAN="5,1")
    assert rc != 0
    assert out.count("non-finite loss at step 5 on rank 1") == 2  # both ranks stop, naming the source
    # steps 0..4 were applied (logged as 1..5); step 5 never reached the optimizer, so no row for it
    assert max(losses(tmp_path / "nan")) == 5


def test_ranks_resume_the_checkpoint_rank_0_chose_or_all_stop(tmp_path):
    short = ["train.target_budgets=[4096]", f"train.out_dir={tmp_path}", "train.run_name=split"]
    rc, log = run(2, short)
    assert rc == 0, log
    run_dir = tmp_path / "split"
    rng1 = run_dir / "step_00000008" / "rng_rank1.pt"
    rng1.write_bytes(rng1.read_bytes()[:40])  # only rank 1's file of the newest checkpoint is damaged
    rows = (run_dir / "metrics.jsonl").read_text()
    rc, log = run(2, ["train.target_budgets=[8192]", f"train.out_dir={tmp_path}", "train.run_name=split",
                      "--resume", "auto"])
    # Rank 0 picks step 8; rank 1 cannot load it, so nobody trains (rank 1 must not fall back to step 4).
    assert rc != 0, log
    assert "rank 1: " in log and "step_00000008/rng_rank1.pt: cannot be read as RNG state" in log
    assert "all ranks stop" in log
    assert (run_dir / "metrics.jsonl").read_text() == rows
