"""A run's identity, its name suffix and its diff are derived from the config fields' declarations
(identity_fields.py): equal, for every preset, to what the hand-kept rules before the declarations made (frozen
below, so existing run directories resume and checkpoints load), and a new field joins with one declaration."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from posbench.config import load_config
from posbench.config_loader import to_dict
from posbench.identity_fields import own_entry
from posbench.model.model_config import ModelConfig
from posbench.settings_migration import MIGRATIONS, upgrade
from posbench.training.rundir import identity, identity_diffs, run_name

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


# ---- the rules as training/rundir.py kept them by hand before the declarations (commit 60feddd), frozen ----
_OLD_OPTIONS = ("attention_gate", "attention_sinks", "attention_temperature", "attention_chunk", "qk_norm_weight",
                "qk_norm_layers")


def _old_default(name):
    f = next(f for f in dataclasses.fields(ModelConfig) if f.name == name)
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return to_dict(value) if dataclasses.is_dataclass(value) else value


def _old_value(v):
    return to_dict(v) if dataclasses.is_dataclass(v) else v


def _old_rename(node):
    if isinstance(node, dict):
        if node.get("name") == "prope" and "fraction" in node:
            node["kept_frequencies"] = node.pop("fraction")
        for value in node.values():
            _old_rename(value)
    elif isinstance(node, list):
        for value in node:
            _old_rename(value)


def _old_comparable(ident):
    pe = ident.get("pe")
    if not isinstance(pe, dict):
        return ident
    pe = copy.deepcopy(pe)
    _old_rename(pe)
    return {**ident, "pe": {k: v for k, v in pe.items() if k not in ("drop_at",)}}


def old_identity(cfg, fp):
    model = to_dict(cfg.model)
    model.pop("matmul", None)
    model.pop("kernels", None)
    packing = model.pop("packing", None)
    window = model.pop("attention_window", None)
    options = {name: model.pop(name) for name in _OLD_OPTIONS}
    ident = _old_comparable({"model": model, "pe": to_dict(cfg.pe), "data": fp, "seed": cfg.seed})
    if not cfg.model.packing.is_default:
        ident["packing"] = packing
    if window is not None:
        ident["attention_window"] = window
    ident.update({name: value for name, value in options.items() if value != _old_default(name)})
    return ident


def _per_layer(value):
    return "-".join("full" if x is None else str(x) for x in (value if isinstance(value, list) else [value]))


_OLD_SUFFIXES = {
    "attention_gate": lambda m: f"_gate-{m.attention_gate}",
    "attention_sinks": lambda m: "_sinks",
    "attention_temperature": lambda m: f"_temp-{m.attention_temperature.name}",
    "attention_chunk": lambda m: f"_chunk{_per_layer(m.attention_chunk)}",
    "qk_norm_weight": lambda m: "_qknorm-unit",
    "qk_norm_layers": lambda m: f"_qknorm-{m.qk_norm_layers}",
}


def old_suffix(cfg):
    m, p, w = cfg.model, cfg.model.packing, cfg.model.attention_window
    out = ("_docmask" if p.mask == "document" else "") + ("_docpos" if p.positions == "document" else "")
    out += "" if w is None else "_win" + _per_layer(w)
    on = [n for n in _OLD_OPTIONS if _old_value(getattr(m, n)) != _old_default(n)]
    return out + "".join(_OLD_SUFFIXES[n](m) for n in on)
# ---- end of the frozen rules ----


def _presets():
    """Every model size, PE preset and recipe (recipes set the attention options), and the switches no preset sets."""
    cases = [(f"size/{p.stem}", dict(model_size=p.stem)) for p in sorted((CONFIGS / "model").glob("*.yaml"))]
    cases += [(f"pe/{p.stem}", dict(files=[p], model_size="small")) for p in sorted((CONFIGS / "pe").glob("*.yaml"))]
    cases += [(f"recipe/{p.stem}", dict(files=[p], model_size="small"))
              for p in sorted((CONFIGS / "recipe").glob("*.yaml"))]
    cases += [("switches", dict(model_size="nano", overrides=[
        "model.packing.mask=document", "model.packing.positions=document", "model.packing.bos_id=1",
        "model.attention_window=[8,null]", "model.attention_gate=headwise", "model.attention_sinks=true",
        "model.matmul=onednn", "pe.name=prope", "seed=3"])),
        ("bos_id alone", dict(model_size="nano", overrides=["model.packing.bos_id=1"])),
        ("drope", dict(model_size="nano", pe_type="drope", overrides=["pe.drop_at=0.5"]))]
    return cases


@pytest.mark.parametrize("case", _presets(), ids=lambda c: c[0])
def test_derived_identity_and_name_equal_the_hand_kept_rules(case):
    cfg = load_config(**case[1])
    assert identity(cfg, "fp") == old_identity(cfg, "fp")
    assert run_name(cfg, 10**9) == f"{cfg.model.size}_{cfg.pe.name}_1B_s{cfg.seed}" + old_suffix(cfg)


def test_a_saved_identity_from_before_a_rename_or_a_left_out_field_is_the_same_run():
    cfg = load_config(model_size="nano", pe_type="prope", overrides=["pe.kept_frequencies=0.5"])
    ident = identity(cfg, "fp")
    saved = copy.deepcopy(ident)
    saved["pe"]["fraction"] = saved["pe"].pop("kept_frequencies")
    saved["pe"]["drop_at"] = None  # recorded before the drop point was left out of identities
    assert identity_diffs(saved, ident) == ""
    assert identity_diffs({**saved, "seed": 9}, ident) == f"seed (checkpoint: 9, this run: {cfg.seed})"


def test_a_log_n_run_saved_before_at_least_one_existed_is_the_same_run_and_a_floored_one_is_not():
    ident = identity(load_config(model_size="nano", overrides=["model.attention_temperature.name=log_n"]), "fp")
    saved = copy.deepcopy(ident)
    del saved["attention_temperature"]["at_least_one"]  # what a log_n run directory recorded before the option
    assert identity_diffs(saved, ident) == ""
    floor = ["model.attention_temperature.name=log_n", "model.attention_temperature.at_least_one=true"]
    floored = identity(load_config(model_size="nano", overrides=floor), "fp")
    assert identity_diffs(saved, floored) == \
        "attention_temperature.at_least_one (checkpoint: false, this run: true)"


def test_migrations_are_numbered_in_order_and_leave_todays_names_alone():
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    old = {"schedule": {"drop_pe_at": 0.7}, "pe": {"name": "hybrid", "pattern": [{"name": "prope", "fraction": 0.25}]}}
    assert upgrade(old) == {"schedule": {}, "pe": {"name": "hybrid", "drop_at": 0.7,
                                                     "pattern": [{"name": "prope", "kept_frequencies": 0.25}]}}
    today = to_dict(load_config(model_size="nano", pe_type="prope"))
    assert upgrade(copy.deepcopy(today)) == today


@dataclasses.dataclass
class WithNewOption(ModelConfig):
    """ModelConfig and one option more: its single declaration is all it takes to join the identity."""

    frobnicate: int = dataclasses.field(default=0, metadata=own_entry(lambda v: f"_frob{v}"))


def _with_new_option(value):
    cfg = load_config(model_size="nano")
    fields = {f.name: getattr(cfg.model, f.name) for f in dataclasses.fields(ModelConfig) if f.init}
    cfg.model = WithNewOption(**fields, frobnicate=value)
    return cfg


def test_a_new_option_joins_identity_name_and_diff_with_one_declaration():
    plain, default, set_ = load_config(model_size="nano"), _with_new_option(0), _with_new_option(3)
    # at its default: the identity and name of a run from before the option existed (it resumes)
    assert identity(default, "fp") == identity(plain, "fp") and run_name(default, 10**9) == run_name(plain, 10**9)
    ident = identity(set_, "fp")
    assert ident["frobnicate"] == 3 and "frobnicate" not in ident["model"]
    assert run_name(set_, 10**9) == run_name(plain, 10**9) + "_frob3"
    assert identity_diffs(identity(plain, "fp"), ident, WithNewOption) == \
        "frobnicate (checkpoint: 0, this run: 3)"
