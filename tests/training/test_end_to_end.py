"""A new user's path on their own corpus: tokenize with the data CLI, train with train.py on the real
token shards, branch a smaller budget's decay, and resume a stopped run, all as subprocesses."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_word_corpus
from tests.training.helpers import losses

ROOT = Path(__file__).resolve().parents[2]


def sh(*args):
    p = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout + p.stderr


@pytest.mark.slow  # the whole path through four subprocesses: an integration test
def test_tokenize_train_branch_resume_on_local_shards(tmp_path):
    corpus = write_word_corpus(tmp_path / "corpus", n_files=3, docs_per_file=120, words=(20, 120))
    data = ["configs/data/local_example.yaml", f"data.root={tmp_path / 'data'}",
            f"data.source.paths=[{corpus}/*.jsonl]"]
    out = sh("-m", "posbench.data.prepare_fineweb", "tokenize", *data)
    assert "tokenized 3 files" in out
    common = [*data, "--model-size", "nano", "model.seq_len=64", "train.budget_unit=tokens",
              "train.target_budgets=[8192,16384]", "train.global_batch_tokens=512", "train.micro_batch=4",
              f"train.out_dir={tmp_path / 'ck'}", "train.log_interval=1", "train.eval_interval=8",
              "train.eval_batches=2", "logging.wandb=disabled"]
    sh("train.py", *common, "train.run_name=main")
    main = tmp_path / "ck" / "main"
    got = losses(main)
    assert max(got) == 32 and got[32] < got[1] - 1.0, "the model learns from the shards"
    rows = [json.loads(x) for x in (main / "metrics.jsonl").read_text().splitlines()]
    assert any("val_loss" in r for r in rows)
    # branch: the decay of the smaller budget from its branch checkpoint, in its own run directory
    sh("train.py", *common, "--branch-from", str(main / "branch_8.19K"), "--budget", "8192")
    branch = tmp_path / "ck" / "nano_rope_8.19K_s42"
    meta = json.loads((branch / "latest" / "meta.json").read_text())
    assert meta["tokens"] == 8192 and meta["parent"]["run"] == "main" and meta["kind"] == "final"
    # stop after 5 steps, resume: identical per-step losses to the uninterrupted main run
    sh("train.py", *common, "train.run_name=stopped", "train.max_steps=5")
    sh("train.py", *common, "train.run_name=stopped", "--resume", "auto")
    assert losses(tmp_path / "ck" / "stopped") == got
