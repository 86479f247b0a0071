"""A checkpoint's files agree with each other before anything reads it as a model (resume, eval, export).

meta.json records the run as trained: its `identity` (model, PE, packing, window: training/rundir.py) is what
resuming compares against, and its `step` is the data cursor. config.yaml is what readers build the model from.
RoPE, ALiBi and NoPE have the same parameters, so weights alone cannot tell an edited config.yaml (`pe: alibi`
over RoPE weights) from the real one: without this check such a checkpoint is evaluated and exported as the
wrong model. Each disagreement is a CheckpointError (exit code 4) naming the field and the file.

Old checkpoints stay loadable: a field meta.json does not record (written before the field existed) is not
compared, and a meta.json without an identity is compared on its step alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from posbench.config import RunConfig
from posbench.config_loader import to_dict
from posbench.errors import CheckpointError, brief
from posbench.identity_fields import own_entries
from posbench.training.checkpoint_read import PICK_ANOTHER
from posbench.training.rundir import identity

_STEP_DIR = re.compile(r"^step_(\d+)$")


def _refuse(file: Path, what: str) -> CheckpointError:
    return CheckpointError(f"{file}: {what}; the checkpoint was edited or its files come from different runs. "
                           f"{PICK_ANOTHER}")


def check_meta_fields(meta: dict, step_dir: Path) -> None:
    """meta.json's `step` and `tokens`, where present, are counts (integers >= 0) and
    the step is the one the directory is named after (`step_00000040` holds step 40): a step of 100000 there
    would resume the data cursor and the schedule far past the weights' training."""
    file = step_dir / "meta.json"
    for key in ("step", "tokens"):
        if key in meta and (type(meta[key]) is not int or meta[key] < 0):
            raise _refuse(file, f"`{key}` is {brief(meta[key], 40)}, not a count (an integer >= 0)")
    step = meta.get("step")
    named = _STEP_DIR.match(step_dir.name)
    if step is not None and named and int(named.group(1)) != step:
        raise _refuse(file, f"`step` is {step} but the checkpoint is {step_dir.name} (step {int(named.group(1))})")


def check_optimizer_step(optim: object, meta: dict, step_dir: Path) -> None:
    """The optimizer never takes more steps than the trainer (a skipped fp16 step makes it fewer): AdamW's
    per-parameter `step` above meta.json's `step` means the step was edited. Checked where optim.pt is read
    anyway (resuming), so it costs no extra read."""
    state = optim.get("state") if isinstance(optim, dict) else None
    steps = [int(s["step"]) for s in (state or {}).values()
             if isinstance(s, dict) and getattr(s.get("step"), "numel", lambda: 0)() == 1]
    if steps and isinstance(meta.get("step"), int) and max(steps) > meta["step"]:
        raise _refuse(step_dir / "meta.json", f"`step` is {meta['step']} but optim.pt has taken {max(steps)} "
                                              "optimizer steps")


def _differences(saved: dict, ours: dict, prefix: str) -> list[str]:
    """`prefix.key (config.yaml: X, meta.json: Y)` for each key both record with different values."""
    return [f"{prefix}.{k} (config.yaml: {brief(ours[k], 40)}, meta.json: {brief(v, 40)})"
            for k, v in saved.items() if k in ours and ours[k] != v]


def check_config_agrees(cfg: RunConfig, meta: dict, step_dir: Path) -> None:
    """config.yaml (`cfg`, as read, before any evaluation override) describes the run meta.json records: the same
    architecture, PE (name and options), packing and attention window, and the PE switched (DroPE's drop)
    exactly when meta.json says it was. CheckpointError naming the fields otherwise."""
    saved = meta.get("identity")
    # what identity() makes of this config, through JSON as meta.json holds it (tuples become lists)
    ours = json.loads(json.dumps(identity(cfg, "")))
    problems = []
    if isinstance(saved, dict) and isinstance(saved.get("model"), dict):
        problems += _differences(saved["model"], ours["model"], "model")
        saved_pe = saved.get("pe") if isinstance(saved.get("pe"), dict) else {}
        if "name" in saved_pe and saved_pe["name"] != ours["pe"]["name"]:
            problems.append(f"pe.name (config.yaml: {brief(ours['pe']['name'], 40)}, meta.json: "
                            f"{brief(saved_pe['name'], 40)})")
        else:  # `dropped` changes during the run (DroPE); compared with pe_dropped_at_tokens below
            problems += _differences({k: v for k, v in saved_pe.items() if k != "dropped"}, ours["pe"], "pe")
        # identity() records the model's own entries (packing, the window, the attention options: identity_fields.py)
        # only when they are not the default, so absent = default
        for key in (e.name for e in own_entries(type(cfg.model))):
            if saved.get(key) != ours.get(key):
                problems.append(f"model.{key} (config.yaml: {brief(ours.get(key), 60)}, meta.json: "
                                f"{brief(saved.get(key), 60)})")
    if isinstance(meta.get("packing"), dict) and not any(p.startswith("model.packing") for p in problems):
        # the whole packing, bos_id included, as training used it
        problems += _differences(meta["packing"], to_dict(cfg.model.packing), "model.packing")
    switched = cfg.pe.after_switch()  # None: a PE without a switch (DroPE's pe.dropped, RePo's pe.switched)
    if isinstance(switched, bool) and switched != ("pe_dropped_at_tokens" in meta):
        recorded = "never switched" if switched else f"switched at {brief(meta['pe_dropped_at_tokens'], 30)} tokens"
        problems.append(f"the PE's switch at {cfg.pe.switch_setting} (config.yaml: {'after' if switched else 'before'} "
                        f"it, meta.json: {recorded})")
    if problems:
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise _refuse(step_dir / "config.yaml", "does not describe the run its meta.json records: "
                                                f"{'; '.join(dict.fromkeys(problems[:3]))}{more}")
