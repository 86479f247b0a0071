"""Strict loading of typed dataclass configs from YAML files and dotted CLI overrides.

Generic machinery only: it knows nothing about models or PEs. `config.py` declares the dataclasses.

Rules (why: a typo in a sweep config silently training the wrong model wastes GPU-days):
- unknown keys are errors that name the nearest valid key;
- values are checked against the field's annotation (int, float, bool, str, Literal, list, nested
  dataclass); ints are accepted for floats, and "1e9"-style strings for numbers, nothing looser;
- a field annotated with a *polymorphic* base (a class with a `registry_lookup(name)` classmethod)
  picks its concrete dataclass from the `name` key of its mapping, so each variant validates its
  own fields (`pe.name=alibi pe.theta=1` fails: alibi has no `theta`).

Bounded: YAML is read through `posbench.yaml_io` (size, depth, alias expansion and duplicate keys capped).
Messages show values through `posbench.errors.brief`, bounded whatever the value.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import yaml

from posbench.errors import ConfigError, brief, brief_key, clip
from posbench.yaml_io import YAMLLimitError, load_yaml, parse_yaml, yaml_problem


class Checked:
    """The one validation hook of a config value: `check()` raises ConfigError saying what to change when the value's
    own fields are wrong. It runs when the value is built (dataclass `__post_init__`), so no invalid config exists; a
    subclass's `check` calls `super().check()` first. What needs more than the value (the model's dimensions, the run's
    PE) is `check_model`, on PEs and architectures, run once by `RunConfig.resolve()`."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Nothing to check beyond the fields' types (the loader checks those)."""

MAX_INT = 2**63


def require(cond: bool, message: str) -> None:
    """Raise ConfigError(message) unless cond; keeps validation one line per rule."""
    if not cond:
        raise ConfigError(message)


def nearest(name: str, choices) -> str:
    """' (did you mean `x`?)' for the closest of `choices`, or a list of valid choices."""
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    if close:
        return f" (did you mean `{close[0]}`?)"
    return f" (valid: {', '.join(choices)})"


def deep_merge(base: dict, update: dict) -> dict:
    """Merge `update` into a copy of `base`; nested mappings merge, everything else replaces.

    A mapping whose `name` changes replaces the old mapping entirely: options of the previous
    polymorphic variant (e.g. RoPE's `theta`) must not leak into the new one (e.g. ALiBi).
    """
    out = dict(base)
    for key, value in update.items():
        old = out.get(key)
        same_variant = not (isinstance(value, dict) and "name" in value and isinstance(old, dict)
                            and old.get("name") not in (None, value["name"]))
        if isinstance(value, dict) and isinstance(old, dict) and same_variant:
            out[key] = deep_merge(old, value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> dict:
    """`model.d_model=256` -> {"model": {"d_model": 256}}; the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override `{text}` must look like key.sub=value")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override `{text}` has an empty key part")
    try:
        value = parse_yaml(raw) if raw != "" else ""
    except YAMLLimitError as e:
        raise ConfigError(f"override `{key}`: value `{clip(raw)}` refused: {yaml_problem(e)}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"override `{key}`: value `{clip(raw)}` is not valid YAML: {yaml_problem(e)}") from None
    except ValueError as e:
        raise ConfigError(f"override `{key}`: value `{clip(raw)}` cannot be built: {brief(str(e), 120)}") from None
    nested: dict = {}
    cursor = nested
    parts = key.split(".")
    for part in parts[:-1]:
        cursor[part] = {}
        cursor = cursor[part]
    cursor[parts[-1]] = value
    return nested


def split_sources(sources: list[str]) -> tuple[list[str], list[str]]:
    """Positional sources -> (YAML files, dotted overrides), order kept within each. A source naming an existing
    file is that file even with `=` in its name (`lr=3e-3.yaml`); any other source with `=` is an override."""
    files = [s for s in sources if "=" not in s or Path(s).is_file()]
    return files, [s for s in sources if s not in files]


def nested(dotted: str, value: Any) -> dict:
    """`model.d_model`, 128 -> {"model": {"d_model": 128}}: a typed value placed at a dotted key."""
    out: Any = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


# An override is either text the user typed (`pe.name=alibi`, parsed as YAML once, here) or a mapping of
# values that are already typed (a CLI flag, a study cell, a sweep axis): those are merged as they are,
# never formatted back into `key=value` text to be parsed again.
Override = str | dict


def merge_sources(files: list[str | Path], overrides: list[Override], base: dict | None = None) -> dict:
    """`base`, then YAML files merged left to right, then overrides in order."""
    merged: dict = dict(base or {})
    for f in files:
        merged = deep_merge(merged, load_yaml(f))
    for o in overrides:
        # `pe.name=alibi` arrives as {"pe": {"name": "alibi"}}: deep_merge drops the old variant's options.
        merged = deep_merge(merged, parse_override(o) if isinstance(o, str) else o)
    return merged


def load(cls, files: list[str | Path] = (), overrides: list[Override] = (), base: dict | None = None,
         where: str = ""):
    """The one loader of typed configs (train, eval, study, sweep): merge, then build `cls` strictly."""
    return from_dict(cls, merge_sources(list(files), list(overrides), base), where)


def _is_polymorphic(tp) -> bool:
    return isinstance(tp, type) and hasattr(tp, "registry_lookup")


def _whole_number(value: Any) -> int | None:
    """`value` as an integer when it is one: an int, or a whole float or numeric string (`1e9` parses as a float in
    YAML, and PyYAML reads `1e9` without a dot as a string); None otherwise (bool, 1.5, "abc", inf, nan)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _same_shape(value: Any, tp) -> bool:
    """Whether `value` has the shape of annotation `tp`: a list for a list or tuple, a mapping for a dict or a
    dataclass, a value of a listed type for a Literal, a number for int and float, a scalar for anything else."""
    origin = get_origin(tp)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict or dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    if origin is Literal:
        return isinstance(value, tuple(type(a) for a in get_args(tp)))
    if tp in (int, float):
        return _number(value)
    return not isinstance(value, (list, tuple, dict))


def _number(value: Any) -> bool:
    """A number, or text that reads as one (not a bool)."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _coerce(value: Any, tp, where: str):
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as e:
                errors.append((arg, str(e)))
        # the member of value's own shape says what is wrong (`1e20` for `int | list[int]`: out of range, not
        # "fits none"); only a value of no member's shape gets the whole union
        alike = [e for arg, e in errors if _same_shape(value, arg)]
        if len(alike) == 1 or len(errors) == 1:
            raise ConfigError((alike or [errors[0][1]])[0])
        raise ConfigError(f"{where}: {brief(value)} fits none of {tp}")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {brief(value)} is not one of {list(allowed)}"
                              + (nearest(clip(value), map(str, allowed)) if isinstance(value, str) else ""))
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {brief(value)}")
        (item_tp, *_rest) = get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__} {brief(value)}")
        key_tp, value_tp = get_args(tp) or (Any, Any)
        return {_coerce(k, key_tp, f"{where} key"): _coerce(v, value_tp, f"{where}.{brief_key(k)}")
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if dataclasses.is_dataclass(value):
            value = to_dict(value)
        if isinstance(value, str) and _is_polymorphic(tp):  # a registered name alone: that class, its defaults
            value = {"name": value}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping for {tp.__name__}, got {brief(value)}")
        return from_dict(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {brief(value)}")
    if tp is int:
        whole = _whole_number(value)
        if whole is None:
            raise ConfigError(f"{where}: expected an integer, got {brief(value)}")
        if not -MAX_INT < whole < MAX_INT:  # every integer setting ends up in torch or numpy (int64)
            raise ConfigError(f"{where}: {brief(whole)} is out of range (an integer setting is below 2**63)")
        return whole
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {brief(value)}")
        if isinstance(value, (int, float)):
            try:
                return float(value)
            except OverflowError:  # an integer of 400 digits
                raise ConfigError(f"{where}: {brief(value)} is too large for a number") from None
        if isinstance(value, str):
            try:
                return float(value)  # PyYAML reads `1e-3` (no dot) as a string
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected a number, got {brief(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {brief(value)}")
    raise ConfigError(f"{where}: unsupported annotation {tp}")


def from_dict(cls, data: dict, where: str = ""):
    """Build dataclass `cls` from a mapping, strictly. Nested dataclasses recurse."""
    if _is_polymorphic(cls):
        name = data.get("name", getattr(cls, "default_name", None))
        if name is None:
            raise ConfigError(f"{where or cls.__name__}: missing `name`")
        if not isinstance(name, str):
            raise ConfigError(f"{where + '.' if where else ''}name: expected a string, got {brief(name)}")
        cls = cls.registry_lookup(name, where)
        data = {**data, "name": name}
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            label = f"{where}." if where else ""
            if key in getattr(cls, "replaced_keys", {}):  # a setting that moved: say where, not "did you mean"
                raise ConfigError(f"`{label}{key}` is no longer a setting: {cls.replaced_keys[key]}")
            raise ConfigError(f"unknown config key `{label}{brief_key(key)}` for {cls.__name__}"
                              + nearest(brief_key(key), fields))
        sub = f"{where}.{key}" if where else key  # a field's name: the key is one of `fields`
        kwargs[key] = _coerce(value, hints[key], sub)
    try:
        obj = cls(**kwargs)
    except ConfigError:
        raise
    except TypeError as e:
        raise ConfigError(f"{where or cls.__name__}: {e}") from None
    return obj


def to_dict(obj) -> dict:
    """Dataclass -> plain dict (YAML-safe), including the `name` of polymorphic configs."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            if f.init:
                out[f.name] = to_dict(getattr(obj, f.name))
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def changes(obj, default) -> dict:
    """The settings of dataclass `obj` that differ from `default`'s, as a nested mapping in field order: of a nested
    config only the keys that changed, of a polymorphic one whose variant changed the whole (its `name` and options)."""
    return _changed(to_dict(obj), to_dict(default))


def _changed(new: dict, old: dict) -> dict:
    out = {}
    for key, value in new.items():
        base = old.get(key)
        if isinstance(value, dict) and isinstance(base, dict) and value.get("name") == base.get("name"):
            if inner := _changed(value, base):
                out[key] = inner
        elif value != base:
            out[key] = value
    return out


def dump_yaml(obj) -> str:
    return yaml.safe_dump(to_dict(obj), sort_keys=False)
