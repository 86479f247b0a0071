"""How a config field enters a run's identity, declared on the field (dataclass field metadata).

A run directory belongs to one identity (training/rundir.py): what a resume must agree on. Each field of a typed
config says its part once, where it is declared, and the identity, the run name's suffix and the diff of a refused
resume are derived from those declarations:

  (no declaration)         part of its group's entry (`model`, `pe`): a changed value is another run.
  `left_out(why)`          no part of the identity: the field picks how, not what (model.matmul: the library of the
                           same products) or when (pe.drop_at: a point of the schedule), so a resume may change it.
  `own_entry(suffix, ...)` its own top-level entry, present only when set away from its default, and a part of the
                           run name then: run directories made before the field existed keep their identity (and
                           resume), and runs differing only in it get names that say so.

Adding a model option to the identity is its one `own_entry(...)` (tests/training/test_identity_declared.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posbench.config_loader import to_dict

KEY = "posbench.identity"


@dataclass(frozen=True)
class LeftOut:
    why: str


@dataclass(frozen=True)
class OwnEntry:
    """`suffix(value)`: its part of the run name when set. `is_set(value)`: whether it is (default: its value as
    to_dict writes it differs from the default's). `place`: where its suffix sits in the name and its line in a diff;
    the options that predate the declarations carry their historical places, a new one needs none (it goes last, in
    field order)."""

    suffix: Callable[[Any], str]
    is_set: Callable[[Any], bool] | None = None
    place: float = math.inf


def left_out(why: str) -> dict:
    """Field metadata: no part of a run's identity (`why` says what the field picks instead)."""
    return {KEY: LeftOut(why)}


def own_entry(suffix: Callable[[Any], str], is_set: Callable[[Any], bool] | None = None,
              place: float = math.inf) -> dict:
    """Field metadata: the field's own identity entry and run-name suffix, when set (`OwnEntry`)."""
    return {KEY: OwnEntry(suffix, is_set, place)}


def field_default(f: dataclasses.Field):
    """A field's default as to_dict writes it."""
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return to_dict(value)


@dataclass(frozen=True)
class Entry:
    """One `own_entry` field of a config class, with its default (as to_dict writes it)."""

    name: str
    decl: OwnEntry
    default: Any

    def is_set(self, value) -> bool:
        return self.decl.is_set(value) if self.decl.is_set else to_dict(value) != self.default


def left_out_names(cls) -> tuple[str, ...]:
    """The fields of config class `cls` declared `left_out`, in field order."""
    return tuple(f.name for f in dataclasses.fields(cls) if isinstance(f.metadata.get(KEY), LeftOut))


def own_entries(cls) -> tuple[Entry, ...]:
    """The fields of config class `cls` declared `own_entry`, in their places (then field order)."""
    found = [(f.metadata[KEY].place, i, Entry(f.name, f.metadata[KEY], field_default(f)))
             for i, f in enumerate(dataclasses.fields(cls)) if isinstance(f.metadata.get(KEY), OwnEntry)]
    return tuple(entry for _, _, entry in sorted(found, key=lambda x: x[:2]))


def group_and_entries(obj) -> tuple[dict, dict]:
    """(the group entry: every field of config `obj` that is neither left out nor its own entry, as to_dict writes
    them; the own entries that are set, in their places)."""
    cls = type(obj)
    group = to_dict(obj)
    for name in left_out_names(cls):
        group.pop(name, None)
    entries = own_entries(cls)
    values = {e.name: group.pop(e.name) for e in entries}
    return group, {e.name: values[e.name] for e in entries if e.is_set(getattr(obj, e.name))}


def name_suffix(obj) -> str:
    """The run name's part for config `obj`: each set own entry's suffix, in their places ("" by default)."""
    values = [(e, getattr(obj, e.name)) for e in own_entries(type(obj))]
    return "".join(e.decl.suffix(value) for e, value in values if e.is_set(value))
