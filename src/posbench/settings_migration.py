"""Renamed and moved settings, as one versioned list of steps: every reader of saved settings upgrades them here.

A checkpoint's config.yaml (training/checkpoint_read.py), a run directory's identity.json and a meta.json's identity
(training/rundir.py `comparable`) and a study cell's recorded spec (studies/study_runner.py) may each have been
written before a setting was renamed; `upgrade` brings any of them to this version's names, so an old checkpoint
loads, an old run directory resumes, and an old finished cell is reused. A rename is one step appended to
`MIGRATIONS` with the next version number; nothing else changes. Saved files carry no version of their own, so every
step applies where it finds the old spelling and leaves everything else alone (a document already in today's names
passes through unchanged).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    what: str
    step: Callable[[dict], None]  # in place, on the saved mapping (a run config, an identity, a cell spec)


def _drop_point_to_pe(saved: dict) -> None:
    """A drop point under `schedule` (key drop_pe_at) is DroPE's `pe.drop_at`: null, as every run that did not set
    it saved it, is dropped; a value overrode pe.drop_at in that run, so it becomes pe.drop_at."""
    schedule, pe = saved.get("schedule"), saved.get("pe")
    if isinstance(schedule, dict) and "drop_pe_at" in schedule:
        share = schedule.pop("drop_pe_at")
        if share is not None and isinstance(pe, dict):
            pe["drop_at"] = share


def _every_mapping(node, step: Callable[[dict], None]) -> None:
    """`step` on every mapping inside `node`, at any depth (a hybrid's member, a study cell's PE or overrides)."""
    if isinstance(node, dict):
        step(node)
        for value in node.values():
            _every_mapping(value, step)
    elif isinstance(node, list):
        for value in node:
            _every_mapping(value, step)


def _prope_fraction(node) -> None:
    """p-RoPE's `fraction` is `kept_frequencies` (the name says which fraction: of frequencies, not of channels as
    pe.rotary_fraction), at any depth."""
    def step(d: dict) -> None:
        if d.get("name") == "prope" and "fraction" in d:
            d["kept_frequencies"] = d.pop("fraction")
    _every_mapping(node, step)


def _log_n_at_least_one(node) -> None:
    """The log_n attention temperature gained `at_least_one` (SWAN-GPT's floor at 1); a log_n saved before it has
    none and meant the unfloored factor, at_least_one false, at any depth."""
    def step(d: dict) -> None:
        if d.get("name") == "log_n" and "base_len" in d and "at_least_one" not in d:
            d["at_least_one"] = False
    _every_mapping(node, step)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "schedule.drop_pe_at -> pe.drop_at", _drop_point_to_pe),
    Migration(2, "pe.fraction (prope) -> pe.kept_frequencies", _prope_fraction),
    Migration(3, "attention_temperature log_n without at_least_one -> at_least_one: false", _log_n_at_least_one),
)
VERSION = MIGRATIONS[-1].version


def upgrade(saved):
    """Saved settings (a mapping, in place) in this version's names, every step in order; anything not a mapping is
    returned as it is (its reader refuses it)."""
    if isinstance(saved, dict):
        for migration in MIGRATIONS:
            migration.step(saved)
    return saved
