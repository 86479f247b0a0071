"""A checkpoint's config.yaml, meta.json, directory name and weights are checked against each other on every load
(training/checkpoint_check.py): an edited config.yaml (RoPE weights under `pe: alibi` or `pe: none`, another
packing.bos_id, another head count of the same shapes) or an edited meta.json step is refused with exit code 4
naming the field, for evaluation, export and resume alike; a meta.json written before some field existed still
loads. And the run's links: a `latest` into another run is refused; a step pruned while evaluating names the
newest."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posbench.errors import CheckpointError
from posbench.evaluation.loading import inspect_checkpoint, load_model, resolve_checkpoint
from posbench.training import checkpoint as ckpt

NANO = ["--model-size", "nano", "model.seq_len=64", "model.vocab_size=512", "data.tokenizer.name=bytes",
        "train.stream=random", "train.budget_unit=tokens", "train.global_batch_tokens=512", "train.micro_batch=2",
        "logging.wandb=disabled", "schedule.warmup_tokens=0", "train.eval_interval=0"]
STEP = "step_00000002"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A nano RoPE run of two steps, a checkpoint after each."""
    root = tmp_path_factory.mktemp("crosscheck")
    proc = subprocess.run([sys.executable, "-m", "posbench", "train", *NANO, "train.target_budgets=[1024]",
                           "train.ckpt_interval=1", f"train.out_dir={root}", "train.run_name=r"], cwd=root,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    return root / "r"


@pytest.fixture
def run(trained, tmp_path) -> Path:
    shutil.copytree(trained, tmp_path / "r", symlinks=True)
    return tmp_path / "r"


def _edit_config(step: Path, edit) -> None:
    raw = yaml.safe_load((step / "config.yaml").read_text())
    edit(raw)
    (step / "config.yaml").write_text(yaml.safe_dump(raw))


def _edit_meta(step: Path, edit) -> None:
    meta = json.loads((step / "meta.json").read_text())
    edit(meta)
    (step / "meta.json").write_text(json.dumps(meta))


def _cli(argv: list[str]) -> tuple[int, str]:
    from posbench.cli.main import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


CONFIG_EDITS = {  # each a config.yaml that still builds a model the weights fit
    "alibi": (lambda c: c.update(pe={"name": "alibi"}), "pe.name (config.yaml: 'alibi', meta.json: 'rope')"),
    "nope": (lambda c: c.update(pe={"name": "none"}), "pe.name (config.yaml: 'none', meta.json: 'rope')"),
    "theta": (lambda c: c["pe"].update(theta=500.0), "pe.theta (config.yaml: 500.0, meta.json: 10000.0)"),
    "bos_id": (lambda c: c["model"]["packing"].update(bos_id=7),
               "model.packing.bos_id (config.yaml: 7, meta.json: None)"),
    "heads": (lambda c: c["model"].update(n_heads=2), "model.n_heads (config.yaml: 2, meta.json: 4)"),  # same shapes
    "window": (lambda c: c["model"].update(attention_window=16),
               "model.attention_window (config.yaml: 16, meta.json: None)"),
}


@pytest.mark.parametrize("case", list(CONFIG_EDITS))
def test_a_config_that_disagrees_with_meta_is_refused_for_eval_and_export(run, case):
    edit, text = CONFIG_EDITS[case]
    _edit_config(run / STEP, edit)
    for load in (inspect_checkpoint, load_model):  # eval's plan, eval's run, export and lm-eval
        with pytest.raises(CheckpointError, match="does not describe the run its meta.json records") as e:
            load(run / STEP)
        assert text in str(e.value) and str(run / STEP / "config.yaml") in str(e.value), str(e.value)
        assert e.value.exit_code == 4


def test_eval_command_exits_4_on_rope_weights_labelled_alibi(run):
    _edit_config(run / STEP, CONFIG_EDITS["alibi"][0])
    code, err = _cli(["eval", str(run / STEP), "--suite", "ppl", "--out", str(run / "ev"), "--no-progress"])
    assert code == 4 and err.count("\n") == 1 and "pe.name" in err and "Traceback" not in err, err


def test_a_dropped_flag_that_disagrees_with_meta_is_refused(run):
    """A DroPE run's config.yaml saying `dropped: true` where meta.json records no drop (or the reverse) would
    evaluate a RoPE-trained model as NoPE."""
    def as_drope(meta):
        meta["identity"]["pe"].update(name="drope", dropped=False, drop_at=0.8)
    _edit_meta(run / STEP, as_drope)
    _edit_config(run / STEP, lambda c: c["pe"].update(name="drope", dropped=True, drop_at=0.8))
    with pytest.raises(CheckpointError,
                       match=r"switch at pe.drop_at \(config.yaml: after it, meta.json: never switched\)"):
        inspect_checkpoint(run / STEP)
    _edit_meta(run / STEP, lambda m: m.update(pe_dropped_at_tokens=512))
    assert inspect_checkpoint(run / STEP)[1].pe.dropped


META_EDITS = {
    "far_ahead": (lambda m: m.update(step=100000, tokens=100000 * 512), "`step` is 100000 but the checkpoint is "
                                                                       "step_00000002"),
    "float": (lambda m: m.update(step=1e30), "`step` is 1e+30, not a count"),
    "negative": (lambda m: m.update(step=-5), "`step` is -5, not a count"),
    "tokens": (lambda m: m.update(tokens=-1), "`tokens` is -1, not a count"),
}


@pytest.mark.parametrize("case", list(META_EDITS))
def test_a_tampered_meta_step_is_refused_for_eval_and_resume(run, case):
    edit, text = META_EDITS[case]
    _edit_meta(run / STEP, edit)
    with pytest.raises(CheckpointError) as e:
        inspect_checkpoint(run / STEP)
    assert text in str(e.value) and "meta.json" in str(e.value), str(e.value)
    code, err = _cli(["train", *NANO, "train.target_budgets=[2048]", f"train.out_dir={run.parent}",
                      "train.run_name=r", "--resume", str(run / STEP)])
    assert code == 4 and f"{run / STEP / 'meta.json'}" in err and "step" in err, err


def test_a_copied_step_dir_with_an_edited_step_is_refused_by_its_optimizer_state(run, tmp_path):
    """No step in the directory's name (a copy): optim.pt's step count is the witness."""
    copy = tmp_path / "r" / "mine"
    shutil.copytree(run / "step_00000001", copy)
    _edit_meta(copy, lambda m: m.update(step=0))
    with pytest.raises(CheckpointError, match=r"`step` is 0 but optim.pt has taken 1 optimizer steps"):
        ckpt.load(copy)


def test_a_resume_from_an_edited_config_is_refused(run):
    _edit_config(run / STEP, CONFIG_EDITS["nope"][0])
    code, err = _cli(["train", *NANO, "train.target_budgets=[2048]", f"train.out_dir={run.parent}",
                      "train.run_name=r", "--resume", str(run / STEP)])
    assert code == 4 and "pe.name (config.yaml: 'none', meta.json: 'rope')" in err, err


def test_an_old_meta_without_newer_fields_still_loads(run):
    """Written before `packing`, before some model and PE options existed, or with no identity at all."""
    def old(meta):
        meta.pop("packing")
        meta["identity"]["model"].pop("qk_norm")
        meta["identity"]["pe"].pop("rotary_fraction")
    _edit_meta(run / STEP, old)
    assert load_model(run / STEP).meta["step"] == 2
    _edit_meta(run / STEP, lambda m: m.pop("identity"))
    assert inspect_checkpoint(run / STEP)[1].pe.name == "rope"
    (run / STEP / "meta.json").unlink()
    assert load_model(run / STEP).meta == {}


def test_latest_into_another_run_is_refused(run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(run, other, symlinks=True)
    (other / "latest").unlink()
    (other / "latest").symlink_to(run / STEP)
    for given in (other, other / "latest"):
        with pytest.raises(CheckpointError, match="outside its run directory") as e:
            resolve_checkpoint(given)
        assert str(other / "latest") in str(e.value) and e.value.exit_code == 4
    code, err = _cli(["eval", str(other), "--suite", "ppl", "--out", str(tmp_path / "ev"), "--no-progress"])
    assert code == 4 and "outside its run directory" in err, err


def test_a_pruned_step_names_the_newest_and_a_dangling_latest_reads_it(run, capsys):
    shutil.rmtree(run / "step_00000001")
    with pytest.raises(CheckpointError, match=f"the run's newest is {run / STEP}") as e:
        resolve_checkpoint(run / "step_00000001")
    assert e.value.exit_code == 4
    (run / ".tmp_step_00000003").mkdir()
    with pytest.raises(CheckpointError, match="is being written by a training run"):
        resolve_checkpoint(run / "step_00000003")
    (run / "latest").unlink()
    (run / "latest").symlink_to("step_00000003")  # training swaps `latest` before pruning; here the step is gone
    assert resolve_checkpoint(run) == (run / STEP).resolve()
    assert "reading the run's newest, step_00000002" in capsys.readouterr().err


def test_eval_of_a_run_dir_whose_step_is_pruned_after_planning_reads_the_newest(run, tmp_path):
    """eval plans every checkpoint, then loads each: a step pruned in between is re-resolved from the path given."""
    from posbench.evaluation import eval_runner
    from posbench.evaluation.eval_config import load_eval_config

    (run / "latest").unlink()
    (run / "latest").symlink_to("step_00000001")
    (tmp_path / "text.txt").write_text("plain words in a line of text. " * 40)
    cfg = load_eval_config(overrides=["suites=[ppl]", "lengths=[32]", "progress=false", "device=cpu",
                                      f"ppl.data={{name: text, paths: [{tmp_path / 'text.txt'}]}}"])
    planned = eval_runner.plan([str(run)], cfg, eval_runner.choose_device("cpu"))
    assert planned[0].target.path.name == "step_00000001"
    shutil.rmtree(run / "step_00000001")  # pruned by the run, which also moved `latest`
    (run / "latest").unlink()
    (run / "latest").symlink_to(STEP)
    result = eval_runner.evaluate(planned[0], cfg, eval_runner.choose_device("cpu"))
    assert result["checkpoint"] == str((run / STEP).resolve()) and result["step"] == 2
