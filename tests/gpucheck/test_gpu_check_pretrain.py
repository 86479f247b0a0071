"""scripts/gpu_check.py pretrain: the token budget and a probe's timing against hand-computed numbers, a missing
corpus refused before any work, and the dry run end to end on the CPU with only the GPU image's packages
importable: every PE trained on the same tokens and learned, perplexity at 1x-8x under both protocols, the
long-context families at 1x and 2x, the table printed last."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from posbench.gpucheck.pretrain import MULTIPLES, PES, fit_steps, timing, toy_corpus
from tests.gpucheck.test_gpu_check import run_isolated

ROOT = Path(__file__).resolve().parents[2]


def test_one_token_budget_fits_every_pe_by_hand():
    # 540 s: 20 reserved, 30 s of evaluation per PE, set-ups of 10 and 20 s -> 430 s of training. One token through
    # both PEs costs 1/500k + 1/250k = 6e-6 s, so 430 / 6e-6 = 71,666,666 tokens = 1,093.6 steps of 65,536.
    rates, startup, evals = {"a": 500_000.0, "b": 250_000.0}, {"a": 10.0, "b": 20.0}, {"a": 30.0, "b": 30.0}
    assert fit_steps(540, rates, startup, evals, 20, 65_536) == 1093
    assert fit_steps(540, rates, startup, evals, 20, 65_536, max_steps=30) == 30
    assert fit_steps(100, rates, startup, evals, 20, 65_536) == 0  # set-ups and evaluations alone overrun
    # a FlexAttention PE's longer evaluation (b: 90 s) comes off the training time: 370 s / 6e-6 s per token =
    # 61,666,666 tokens = 940.96 steps
    assert fit_steps(540, rates, startup, {"a": 30.0, "b": 90.0}, 20, 65_536) == 940


def test_probe_timing_by_hand():
    # four steps of 1,000 tokens: the first two at 100 and 500 tok/s (compiling), then 1,000 tok/s
    rows = [{"tokens": 1000 * (i + 1), "tokens_per_s": r, "mfu": m}
            for i, (r, m) in enumerate([(100, 0.01), (500, 0.05), (1000, 0.3), (1000, 0.4)])]
    got = timing(rows, wall_s=20.0)
    assert got["tok_s"] == 1000 and got["mfu"] == pytest.approx(0.35)
    assert got["compile_s"] == pytest.approx(10 + 2 - 2)  # 12 s for two steps that take 2 s when warm
    assert got["setup_s"] == pytest.approx(20 - 14)  # 14 s of logged steps in 20 s
    assert timing([{k: v for k, v in r.items() if k != "mfu"} for r in rows], 20.0)["mfu"] is None


def test_missing_corpus_is_one_line_naming_the_builder(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_check_script", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.main(["pretrain", "--dry-run", "--corpus", str(tmp_path / "absent"),
                        "--data-config", str(ROOT / "configs" / "data" / "gpu_corpus.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "no corpus folder" in err and "python scripts/make_gpu_corpus.py" in err


def test_dry_run_end_to_end(tmp_path):
    """The toy corpus is built here (its BPE trainer, rustbpe, is not on the GPU image, and on the GPU machine the
    corpus comes built); the mode then runs in an interpreter that cannot import what the image lacks, with a
    budget a busy machine cannot run out of (a dry run trains at most 30 steps per PE)."""
    corpus, config = toy_corpus(tmp_path / "toy")
    out = tmp_path / "out"
    done = run_isolated(["pretrain", "--dry-run", "--budget-s", "600", "--corpus", str(corpus),
                         "--data-config", str(config), "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "pretrain.json").read_text())
    tables, sizing = report["tables"], report["meta"]["sizing"]
    for part in ("probe", "train", "eval"):
        assert [(r["pe"], r["status"]) for r in tables[part]] == [(pe, "ok") for pe in PES], tables[part]
    trained = tables["train"]
    assert {r["tokens"] for r in trained} == {sizing["tokens_per_pe"]} == {30 * sizing["step_tokens"]}
    assert sizing["epochs"] == pytest.approx(sizing["tokens_per_pe"] / sizing["train_tokens"])
    for r in trained:  # learning happened: below the uniform guess and below its own start
        assert math.isfinite(r["loss"]) and r["loss"] < math.log(r["vocab"]) - 1 and r["loss"] < r["first_loss"]
        assert r["tok_s"] > 0 and r["mfu"] is None  # no MFU without a known peak (a CPU)

    checkpoints = json.loads((out / "pretrain_eval.json").read_text())["tables"]["checkpoints"]
    assert [c["pe"] for c in checkpoints] == PES
    L = checkpoints[0]["suites"]["ppl"]["train_len"]
    for c in checkpoints:
        ppl = c["suites"]["ppl"]
        assert [r["length"] for r in ppl["rows"]] == [m * L for m in MULTIPLES]
        assert all(math.isfinite(r[p]["ppl"]) for r in ppl["rows"] for p in ("nonoverlap", "sliding"))
        families = c["suites"]["long_context"]["families"]
        assert len(families) == 8 and all(list(f["by_length"]) == [str(L), str(2 * L)] for f in families.values())
    row = tables["eval"][0]
    assert row["val_loss"] == checkpoints[0]["suites"]["ppl"]["rows"][0]["nonoverlap"]["loss"]
    assert {f"{p}_{m}x" for p in ("nonoverlap", "sliding") for m in MULTIPLES} <= set(row)

    text = done.stdout[done.stdout.index("# gpu_check pretrain (dry run)"):]
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert "## Pretraining, dry run" in text and "ppl no 8x" in lines[0] and "LC 2x" in lines[0]
    assert [line.split("|")[1].strip() for line in lines[1:]] == PES


def test_too_few_fixed_steps_is_a_usage_error_before_any_work(tmp_path):
    done = run_isolated(["pretrain", "--dry-run", "--pretrain-steps", "5"], tmp_path)
    assert done.returncode == 2
    assert "error: --pretrain-steps 5: give at least 10" in done.stderr and not (tmp_path / "pretrain.json").exists()
