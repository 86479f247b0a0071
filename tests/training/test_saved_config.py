"""The config.yaml a checkpoint saves: the run's settings without one command's fields (train.resume, branch_from,
budget, max_steps), and a config.yaml written before (with those fields and a drop point under schedule) still loads
for evaluation and resumes exactly."""

import json
from pathlib import Path

import pytest
import yaml

from posbench.errors import ConfigError
from posbench.evaluation.loading import load_model
from posbench.training import checkpoint as ckpt
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.train_config import TrainConfig
from tests.training.helpers import losses, nano_config

SOURCE = RandomTokens(512, 64)
INVOCATION = {"resume", "branch_from", "budget", "max_steps"}


def _saved(step_dir: Path) -> dict:
    return yaml.safe_load((step_dir / "config.yaml").read_text())


def _rewrite(path: Path, edit) -> None:
    data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(json.dumps(data) if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False))


def test_checkpoints_save_the_run_without_the_commands_fields(tmp_path):
    assert set(TrainConfig.INVOCATION) == INVOCATION
    run = Path(train(nano_config(tmp_path, "train.run_name=r", "train.max_steps=8"), SOURCE)["run_dir"])
    train(nano_config(tmp_path, "train.run_name=r", "train.resume=auto", "train.max_steps=8"), SOURCE)
    branch = train(nano_config(tmp_path, f"train.branch_from={run / 'branch_8.19K'}", "train.budget=8192"), SOURCE)
    for step_dir in [ckpt.step_dir(run, 8), ckpt.step_dir(run, 16), *ckpt.list_checkpoints(Path(branch["run_dir"]))]:
        saved = _saved(step_dir)
        assert not INVOCATION & set(saved["train"]), step_dir
        assert saved["train"]["global_batch_tokens"] == 512 and saved["pe"]["name"] == "rope"
        assert "drop_pe_at" not in saved["schedule"]


def test_an_old_config_yaml_with_the_commands_fields_and_the_schedule_drop_key_loads_and_resumes(tmp_path):
    """Stopped at step 8, its config.yaml rewritten as older versions wrote it: every field of the run config,
    the command's fields and schedule's drop_pe_at: null included. Resuming it gives the uninterrupted run's
    losses, and evaluation loads it."""
    full = train(nano_config(tmp_path, "train.run_name=full"), SOURCE)
    part = Path(train(nano_config(tmp_path, "train.run_name=part", "train.max_steps=8"), SOURCE)["run_dir"])
    old = {"resume": "", "branch_from": "", "budget": 0.0, "max_steps": 8}
    _rewrite(ckpt.step_dir(part, 8) / "config.yaml",
             lambda c: (c["train"].update(old), c["schedule"].update(drop_pe_at=None)))
    assert _saved(ckpt.step_dir(part, 8))["schedule"]["drop_pe_at"] is None
    assert load_model(ckpt.step_dir(part, 8)).model.pe.__class__.__name__ == "RoPE"
    out = train(nano_config(tmp_path, "train.run_name=part", "train.resume=auto"), SOURCE)
    assert out["step"] == 32 and losses(full["run_dir"]) == losses(part)


def test_an_old_prope_checkpoint_with_pe_fraction_loads_with_the_same_frequencies(tmp_path):
    run = Path(train(nano_config(tmp_path, "train.run_name=p", "pe.name=prope", "pe.kept_frequencies=0.5",
                                 "train.max_steps=4"), SOURCE)["run_dir"])
    step = ckpt.step_dir(run, 4)
    new = load_model(step).model.pe.inv_freq()
    _rewrite(step / "config.yaml", lambda c: c["pe"].update(fraction=c["pe"].pop("kept_frequencies")))
    old = load_model(step).model.pe
    half = new.numel() // 2  # the lower half of the frequencies do not rotate
    assert old.cfg.kept_frequencies == 0.5 and old.inv_freq().equal(new)
    assert new[half:].eq(0).all() and new[:half].gt(0).all()


def _as_old_prope(node) -> None:
    if isinstance(node, dict):
        if node.get("name") == "prope" and "kept_frequencies" in node:
            node["fraction"] = node.pop("kept_frequencies")
        for value in node.values():
            _as_old_prope(value)


def test_an_old_prope_run_resumes_exactly(tmp_path):
    prope = ["pe.name=prope", "pe.kept_frequencies=0.5"]
    whole = Path(train(nano_config(tmp_path / "whole", "train.run_name=p", *prope), SOURCE)["run_dir"])
    run = Path(train(nano_config(tmp_path, "train.run_name=p", *prope, "train.max_steps=8"), SOURCE)["run_dir"])
    written = [p for p in run.rglob("*") if p.suffix in (".json", ".yaml") and "kept_frequencies" in p.read_text()]
    assert any(p.name == "config.yaml" for p in written) and any(p.name == "meta.json" for p in written)
    for path in written:  # every record the run keeps, as a run from before the rename wrote it
        _rewrite(path, _as_old_prope)
    train(nano_config(tmp_path, "train.run_name=p", *prope, "train.resume=auto"), SOURCE)
    assert losses(run) == losses(whole)


def test_pe_fraction_is_refused_naming_kept_frequencies(tmp_path):
    with pytest.raises(ConfigError, match="pe.kept_frequencies"):
        nano_config(tmp_path, "pe.name=prope", "pe.fraction=0.5")


def test_an_old_drope_checkpoint_whose_schedule_set_the_drop_resumes_with_pe_drop_at(tmp_path):
    """A DroPE run that dropped at schedule.drop_pe_at=0.5 recorded the unused pe.drop_at=0.8 in its config.yaml,
    meta.json and identity.json. Its config.yaml reads with pe.drop_at=0.5, and `--resume auto` with
    pe.drop_at=0.5 finds the run directory and continues past the drop as the uninterrupted run did."""
    drope = ["pe.name=drope", "pe.drop_at=0.5"]
    full = train(nano_config(tmp_path, "train.run_name=full", *drope), SOURCE)
    part = Path(train(nano_config(tmp_path, "train.run_name=part", *drope, "train.max_steps=20"), SOURCE)["run_dir"])
    step = ckpt.step_dir(part, 20)
    _rewrite(step / "config.yaml", lambda c: (c["pe"].update(drop_at=0.8), c["schedule"].update(drop_pe_at=0.5)))
    _rewrite(step / "meta.json", lambda m: m["identity"]["pe"].update(drop_at=0.8))
    _rewrite(part / "identity.json", lambda i: i["pe"].update(drop_at=0.8))
    loaded = load_model(step)
    assert loaded.model.pe.cfg.dropped and loaded.model.pe.cfg.drop_at == 0.5
    out = train(nano_config(tmp_path, "train.run_name=part", *drope, "train.resume=auto"), SOURCE)
    assert out["run_dir"] == str(part) and out["step"] == 32
    assert losses(full["run_dir"]) == losses(part)
