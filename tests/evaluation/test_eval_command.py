"""eval.py end to end on nano checkpoints trained here on CPU: results.json, the markdown and the plots,
for one checkpoint and for a comparison of two; every error names its path before any work is done."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from posbench.evaluation.cli import main_eval
from tests.evaluation.helpers import nano_checkpoint, write_text

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"
SMALL = ["--set", "ppl.max_tokens=512", "--set", "algorithmic.n_examples=2", "--set", "algorithmic.shots=[0,1]",
         "--set", "passkey.n_samples=1", "--set", "niah.n_samples=1", "--set", "passkey.depths=[0.0,1.0]",
         "--set", "niah.depths=[0.0,0.5,1.0]", "--tasks", "reverse,sort", "--device", "cpu", "--no-progress"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    text = write_text(root / "held_out.txt", n_words=1000)
    return {"rope": nano_checkpoint(root, "rope"), "learned": nano_checkpoint(root, "learned"), "text": text,
            "root": root}


def strict_json(path: Path) -> dict:
    def no_nan(name):
        raise AssertionError(f"{path} contains {name}")
    return json.loads(path.read_text(), parse_constant=no_nan)


def test_eval_py_compares_two_checkpoints(runs, tmp_path):
    out = tmp_path / "cmp"
    cmd = [sys.executable, "eval.py", str(runs["rope"]), str(runs["learned"] / "latest"), "--suite", "all",
           "--lengths", "64,128,512", "--ppl-text", str(runs["text"]), "--out", str(out), *SMALL]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    for label in ("rope", "learned"):
        res = strict_json(out / label / "results.json")
        assert res["checkpoint"].endswith("step_00000004") and res["step"] == 4
        assert res["config"]["pe"]["name"] == label and res["config"]["data"]["tokenizer"]["name"] == "bytes"
        assert res["code_version"].startswith(("git ", "posbench ")) and res["lengths"] == [64, 128, 512]
        assert set(res["suites"]) == {"ppl", "algorithmic", "passkey", "niah"}
        assert (out / label / "summary.md").read_text().startswith(f"# Evaluation of {label}")
        for png in ("ppl_vs_length", "algorithmic_id_ood", "passkey_heatmap", "niah_heatmap"):
            assert (out / label / f"{png}.png").read_bytes()[:8] == PNG
    rope, learned = (strict_json(out / k / "results.json")["suites"] for k in ("rope", "learned"))
    # rope is defined at every length; the learned table (64 positions) is not: n/a, not an error or a number
    for row in rope["ppl"]["rows"]:
        assert 1 < row["nonoverlap"]["ppl"] < 2 * 512 and row["sliding"]["ppl"] > 1
    ppl_learned = {r["length"]: r for r in learned["ppl"]["rows"]}
    assert ppl_learned[64]["nonoverlap"]["ppl"] > 1
    assert ppl_learned[128]["nonoverlap"] is None and ppl_learned[512]["sliding"] is None
    assert learned["niah"]["by_length"]["512"] is None and rope["niah"]["by_length"]["512"] is not None
    assert {c["shots"] for c in rope["algorithmic"]["cells"]} == {0, 1}

    summary = (out / "summary.md").read_text()
    assert "| length | rope | learned |" in summary and "n/a" in summary
    for png in ("ppl_vs_length", "loss_vs_position", "algorithmic_id_ood", "passkey_heatmap", "niah_heatmap"):
        assert (out / f"{png}.png").read_bytes()[:8] == PNG, png
        assert f"({png}.png)" in summary


def test_one_checkpoint_defaults_to_its_eval_dir_and_records_rope_scaling(runs):
    args = [str(runs["rope"]), "--suite", "ppl", "--lengths", "64,256", "--ppl-text", str(runs["text"]),
            "--rope-scaling", "yarn", "--rope-factor", "4", *SMALL]
    assert main_eval(args) == 0
    out = runs["rope"] / "eval" / (runs["rope"] / "latest").resolve().name  # outside the step dir
    assert not (runs["rope"] / "latest" / "eval").exists()
    res = strict_json(out / "results.json")
    assert res["rope_scaling"] == {"name": "yarn", "factor": 4.0, "original_max_positions": None,
                                   "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}
    assert res["rope_scaling_as_trained"] == [{"pe": "rope", "name": "none", "factor": 1.0}]
    assert list(res["suites"]) == ["ppl"]
    assert "RoPE scaling at evaluation: yarn x4" in (out / "summary.md").read_text()


@pytest.mark.parametrize("case,message", [
    ("missing", "no such checkpoint"),
    ("corrupt", "model.pt: cannot be read as model weights"),
    ("config", "config.yaml"),
    ("rope_on_learned", "needs a rotary PE"),
    ("suite", "unknown suite `pkey` (did you mean `passkey`?)"),
    ("key", "unknown config key `ppl.strides`"),
])
def test_errors_name_the_problem_before_any_work(runs, tmp_path, capsys, case, message):
    bad = tmp_path / "bad_run"
    if case in ("corrupt", "config"):
        shutil.copytree(runs["rope"] / "latest", bad)
        target = bad / ("model.pt" if case == "corrupt" else "config.yaml")
        target.write_bytes(target.read_bytes()[: 200] if case == "corrupt" else b"model: {d_model: [}")
    args = {"missing": [str(runs["rope"]), str(tmp_path / "nope")], "corrupt": [str(runs["rope"]), str(bad)],
            "config": [str(runs["rope"]), str(bad)], "rope_on_learned": [str(runs["rope"]), str(runs["learned"]),
                                                                         "--rope-scaling", "pi", "--rope-factor", "2"],
            "suite": [str(runs["rope"]), "--suite", "ppl,pkey"], "key": [str(runs["rope"]), "--set", "ppl.strides=3"]}
    out = tmp_path / "out"
    assert main_eval([*args[case], "--out", str(out), "--ppl-text", str(runs["text"]), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err
    if case in ("missing", "corrupt", "config"):
        assert str(tmp_path) in err  # names the offending path
    assert not out.exists()  # the valid first checkpoint was not evaluated either
