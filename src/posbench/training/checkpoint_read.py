"""Reading a checkpoint's files, one reader for training and evaluation alike: weights-only tensors (a pickled
object other than tensors is refused unread), finite weights whose shapes match the model, and a bounded
meta.json and config.yaml. Every failure is one CheckpointError line naming the file (exit code 4)."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import torch

from posbench.errors import CheckpointError, ConfigError
from posbench.settings_migration import upgrade
from posbench.yaml_io import load_yaml, read_bounded


def is_state_dict(state: object) -> bool:
    """A state dict maps names to tensors; anything else (a list, a number) is not a model checkpoint."""
    return isinstance(state, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                           for k, v in state.items())


PICK_ANOTHER = "Pick another step_N of the run"


def read_tensors(file: Path, mmap: bool = False, what: str = "model weights") -> object:
    """torch.load(file) as weights only (loading runs no code: a pickled object other than tensors is refused
    unread), every failure a one-line CheckpointError naming the file. torch's own text is not passed on: it
    is long, and for a refused pickle it advises loading with weights_only=False, which would run the code of
    a file from someone else."""
    try:
        with warnings.catch_warnings():  # torch warns about a foreign pickle protocol before refusing it
            warnings.simplefilter("ignore")
            try:
                return torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError:
                if not mmap:
                    raise
            # mmap refuses a file that is not torch's zip format before reading it; read it plainly (still weights
            # only) to say what it holds
            return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(f"{file}: cannot be read as {what}: it holds Python objects other than "
                              "tensors, refused unread (checkpoints are loaded as weights only, so a file from "
                              f"someone else runs no code); not a posbench checkpoint. {PICK_ANOTHER}") from None
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, EOFError, zipfile errors, ... for a bad file
        if isinstance(e, OSError) and not isinstance(e, EOFError):  # unreadable (permissions), not damaged
            raise CheckpointError(f"{file}: cannot be read ({e.strerror or type(e).__name__})") from None
        raise CheckpointError(f"{file}: cannot be read as {what}: the file is truncated, damaged or not a "
                              f"PyTorch checkpoint. {PICK_ANOTHER}") from None


def nonfinite_tensors(state: dict) -> list[str]:
    """Names of the floating tensors holding a NaN or an infinity (checked in slices: no full-size copy)."""
    bad = []
    for name, t in state.items():
        if t.is_floating_point() or t.is_complex():
            flat = t.reshape(-1)
            if any(not torch.isfinite(part).all() for part in flat.split(1 << 22)):
                bad.append(name)
    return bad


def read_state_dict(file: Path, mmap: bool = False) -> dict:
    """A model.pt as a state dict of finite tensors; CheckpointError (exit code 4) naming the file otherwise:
    damaged, holding something else, or holding NaN/inf weights (the one reader of model weights, for
    resuming, evaluation and export alike, so each refuses the same file the same way)."""
    state = read_tensors(file, mmap)
    if not is_state_dict(state):
        raise CheckpointError(f"{file}: holds a {type(state).__name__}, not a state dict of tensors; not a posbench "
                              f"model checkpoint. {PICK_ANOTHER}")
    bad = nonfinite_tensors(state)
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise CheckpointError(f"{file}: checkpoint holds non-finite weights: {', '.join(bad[:3])}{more} (NaN or "
                              f"inf; the run diverged before this save, or the file is damaged). {PICK_ANOTHER}")
    return state


def state_problems(expected: dict, state: dict) -> str:
    """The first differences of `state` from `expected` (a model's state_dict()) in names and shapes, on one line
    ("" when none), instead of torch's multi-line load_state_dict error."""
    problems = [f"{k} is missing" for k in expected if k not in state]
    problems += [f"{k} is not in the model" for k in state if k not in expected]
    problems += [f"{k} is {tuple(state[k].shape)}, the model's {tuple(expected[k].shape)}"
                 for k in expected if k in state and state[k].shape != expected[k].shape]
    more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
    return "; ".join(problems[:3]) + more


def check_state_matches(expected: dict, state: dict, file: Path) -> None:
    """CheckpointError unless `state` has exactly the names and shapes of `expected` (`state_problems`)."""
    problems = state_problems(expected, state)
    if problems:
        raise CheckpointError(f"{file} does not match the model its config.yaml describes: {problems}. "
                              f"{PICK_ANOTHER}")


MAX_META_BYTES = 4 << 20  # a meta.json is a few KB


def read_meta_file(path: Path) -> dict:
    """A checkpoint's meta.json (`path` the step directory), bounded: CheckpointError naming the file when it
    is larger than MAX_META_BYTES, not JSON, or not a JSON object."""
    file = path / "meta.json"
    try:
        meta = json.loads(read_bounded(file, MAX_META_BYTES, "a checkpoint's meta.json").decode("utf-8"))
    except ConfigError as e:  # too large, unreadable
        raise CheckpointError(str(e)) from None
    except json.JSONDecodeError as e:
        why = f"not valid JSON ({e.msg}, line {e.lineno}, column {e.colno})"
    except UnicodeDecodeError:
        why = "not UTF-8 text"
    except RecursionError:
        why = "nested too deeply"
    except ValueError:  # an integer of 5000 digits
        why = "holds a value JSON cannot"
    else:
        if isinstance(meta, dict):
            return meta
        why = f"holds a JSON {type(meta).__name__}, not an object"
    raise CheckpointError(f"{file}: {why}; the checkpoint is damaged. {PICK_ANOTHER}")


def read_config_file(path: Path) -> dict:
    """A checkpoint's config.yaml (`path` the step directory) as a mapping, parsed within the config loader's
    limits and in this version's settings (settings_migration.py); CheckpointError naming the file when it is damaged
    (whether it describes a valid run is the caller's check)."""
    try:
        return upgrade(load_yaml(path / "config.yaml"))
    except ConfigError as e:  # its message names the file already
        raise CheckpointError(f"{e}. {PICK_ANOTHER}") from None

