"""Run directories: `<out_dir>/<size>_<pe>_<budget>_s<seed>[_vN]/`.

A directory belongs to one *identity* (model, PE, data fingerprint, seed), stored in identity.json.
Starting a run whose directory holds another identity moves on to `_v2`, `_v3`, ...; resuming finds
the directory of the same identity. Rank 0 chooses and claims the directory and broadcasts it; it holds
`<run>/.lock` for the whole run.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import shutil
from pathlib import Path

import torch

from posbench.config import RunConfig
from posbench.errors import ConfigError, DataError, PosbenchError, brief, user_path_error, user_paths
from posbench.fileio import DirLock, write_text
from posbench.identity_fields import group_and_entries, left_out_names, name_suffix, own_entries
from posbench.model.model_config import ModelConfig
from posbench.pe import PES
from posbench.settings_migration import upgrade
from posbench.training import distributed as dist

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def format_tokens(n: float) -> str:
    """2.35B, 590M, 12K: the budget as it appears in run names, 3 significant digits of the exact token
    count (tiny: 40 x 58,727,680 params = 2.349e9 -> 2.35B; the reference framework rounds params to 59M
    first and prints 2.4B)."""
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{int(n)}"


def check_run_name(name: str) -> str:
    if not _SAFE.match(name) or ".." in name:
        raise ConfigError(f"unsafe run name `{name}`: use letters, digits, '.', '_', '+', '-' only, no path "
                          "separators, no '..', not absolute")
    return name


def default_name(size: str, pe: str, budget_tokens: int, seed: int) -> str:
    return f"{size}_{pe}_{format_tokens(budget_tokens)}_s{seed}"


def run_name(cfg: RunConfig, end_tokens: int) -> str:
    """train.run_name, or `<size>_<pe>_<budget>_s<seed>` and the suffixes of the model's and the PE's options set away
    from their defaults (`_docmask`, `_win512`, `_sinks`, `_ropeuntil0.5`, ...: identity_fields.py), so runs differing
    only in them get names that say so."""
    return cfg.train.run_name or default_name(cfg.model.size, cfg.pe.name, end_tokens, cfg.seed) \
        + name_suffix(cfg.model) + name_suffix(cfg.pe)


def _atomic_json(path: Path, data: dict) -> None:
    write_text(path, json.dumps(data, indent=1, sort_keys=True))


def find_run_dir(out_dir: Path, name: str, identity: dict) -> tuple[Path, bool]:
    """(directory, exists_already) for this identity: the first of name, name_v2, ... that is free
    or holds the same identity."""
    check_run_name(name)
    version = 1
    while True:
        candidate = out_dir / (name if version == 1 else f"{name}_v{version}")
        ident_file = candidate / "identity.json"
        if not candidate.exists() or (candidate.is_dir() and not candidate.is_symlink()
                                      and not any(candidate.iterdir())):
            return candidate, False  # an empty directory (a start that failed before writing) holds nothing
        if ident_file.is_file() and comparable(read_identity(ident_file)) == identity:
            return candidate, True
        version += 1


def read_identity(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"{path} is empty or not JSON, so this run directory's identity is unknown; restore "
                          "it, or delete the directory if its checkpoints are not needed") from None


def claim_run_dir(run_dir: Path, identity: dict) -> None:
    """Create the run directory and write its identity.json; when that write fails (a full disk) the directory
    is removed again if this call created it, and the error names the file."""
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        _atomic_json(run_dir / "identity.json", identity)
    except OSError as e:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise user_path_error(e, f"cannot write {run_dir / 'identity.json'}") from e


def identity(cfg: RunConfig, data_fingerprint: str) -> dict:
    """What a run directory (and a resume) must agree on: the model's and the PE's settings, the data fingerprint and
    the seed, each model field as it declares (identity_fields.py): in `model`, left out (model.matmul, model.kernels:
    implementations of the same products, so a resume may switch them), or its own entry only when set away from its
    default (model.packing, model.attention_window, the attention options of docs/recipes.md), so that run
    directories made before such an option existed keep their identity. The PE's fields declared left out (pe.drop_at:
    when, not what) are not compared (`comparable`)."""
    model, entries = group_and_entries(cfg.model)
    ident = comparable({"model": model, "pe": pe_settings(cfg.pe), "data": data_fingerprint, "seed": cfg.seed})
    ident.update(entries)
    return ident


def pe_settings(pe) -> dict:
    """The PE's settings as its identity holds them: one mapping, where a field declared `own_entry` (RePo's
    pe.rope_until) is present only when set, so a run from before the field existed keeps its identity."""
    group, entries = group_and_entries(pe)
    return {**group, **entries}


def pe_left_out() -> set[str]:
    """The PE settings no identity compares: every field a registered PE's config declares left out (an identity
    recorded before it was left out, or by another PE, still holds it)."""
    return {name for cls in PES.classes().values() for name in left_out_names(cls.Config)}


def comparable(ident: dict) -> dict:
    """An identity (this run's, or one recorded in an identity.json or meta.json) as identities are compared:
    without the PE's left-out settings (`pe_left_out`), and with the PE's settings under their current names
    (settings_migration.py), the model's options too (a log_n temperature saved before `at_least_one`)."""
    ident = upgrade(copy.deepcopy(ident))
    pe = ident.get("pe")
    if not isinstance(pe, dict):
        return ident
    pe = upgrade(pe)  # an identity keeps the PE's settings as their own mapping: its steps apply there too
    skip = pe_left_out()
    return {**ident, "pe": {k: v for k, v in pe.items() if k not in skip}}


def _shown(value) -> str:
    """A value of an identity as YAML spells it (true, null), bounded; a string up to 200 characters whole, so a
    data fingerprint (about 90) is named exactly, as the user needs it to find its shards."""
    if isinstance(value, str):
        return brief(value, 200) if len(value) > 200 else value
    text = json.dumps(value, sort_keys=True)
    return brief(text, 60) if len(text) > 60 else text


def _field_diffs(name: str, saved, ident) -> list[str]:
    """`name.field (checkpoint: X, this run: Y)` for each field of a mapping that differs (one level: `model`'s
    `attention`, `pe`'s `theta`), or the part itself with both values."""
    if isinstance(saved, dict) and isinstance(ident, dict):
        keys = dict.fromkeys([*ident, *saved])
        return [f"{name}.{k} (checkpoint: {_shown(saved.get(k))}, this run: {_shown(ident.get(k))})"
                for k in keys if saved.get(k) != ident.get(k)]
    return [f"{name} (checkpoint: {_shown(saved)}, this run: {_shown(ident)})"]


def identity_diffs(saved: dict, ident: dict, model_cls: type = ModelConfig) -> str:
    """'model.attention (checkpoint: sdpa, this run: eager), data (checkpoint: X, this run: Y)': each field that
    differs with both values, so a refused resume says what to put back (a kernel, a PE option, the tokenizer or task
    mix the data fingerprint names). An own entry an identity leaves out is at its default (`identity`), and is shown
    as that; `model_cls` declares the entries."""
    saved = comparable(saved)
    entries = own_entries(model_cls)
    defaults = {e.name: e.default for e in entries}
    saved, ident = {**defaults, **saved}, {**defaults, **ident}
    parts = [k for k in ("model", "pe", "data", "seed", *defaults) if saved.get(k) != ident.get(k)]
    return ", ".join(d for k in parts for d in _field_diffs(k, saved.get(k), ident.get(k)))


def refuse_changed_identity(named_dir: Path, ident: dict) -> None:
    """`--resume auto` where the run's directory belongs to another configuration: refuse, rather than
    silently start a fresh `_v2` run that the user believes is a continuation."""
    ident_file = named_dir / "identity.json"
    if ident_file.is_file():
        diffs = identity_diffs(read_identity(ident_file), ident)
        raise ConfigError(f"--resume auto: {named_dir} was trained with another configuration; its {diffs} "
                          "differ from this run's. Fix the config (e.g. the same data.tokenizer and data.mix "
                          "as its shards), or pass train.allow_resume_mismatch=true to override")


def choose_run_dir(cfg: RunConfig, end_tokens: int, ident: dict) -> tuple[Path, bool]:
    name = check_run_name(run_name(cfg, end_tokens))
    out = Path(cfg.train.out_dir)
    if dist.is_main():
        with user_paths():  # train.out_dir is the user's: a file in its way, no permission, a full disk
            run_dir, existed = find_run_dir(out, name, ident)
            if cfg.train.resume == "auto" and not existed and not cfg.train.allow_resume_mismatch:
                refuse_changed_identity(out / name, ident)
            claim_run_dir(run_dir, ident)
    else:
        run_dir, existed = None, False
    shared = [str(run_dir) if run_dir else "", existed]
    if dist.is_distributed():
        torch.distributed.broadcast_object_list(shared, src=0)
    return Path(shared[0]), bool(shared[1])


def lock_run_dir(run_dir: Path, held: contextlib.ExitStack) -> None:
    """Rank 0 holds `run_dir/.lock` until `held` closes; a second run of the same directory stops
    at once (every rank), naming the holder's pid and host, instead of interleaving metrics and
    overwriting checkpoints."""
    error = None
    if dist.is_main():
        try:
            held.enter_context(DirLock(run_dir, "training"))
        except PosbenchError as e:  # busy (DataError), or the OS refused the user's out_dir (UserPathError)
            error = e
    if dist.any_rank(error is not None, dist.collective_device()):
        raise error or DataError(f"rank 0 could not lock {run_dir}; all ranks stop")
