"""Strict configuration: presets, merging, overrides, shortcuts and clear errors."""

import re
import subprocess
import sys

import pytest

from posbench.config import CONFIG_DIR, ModelConfig, RunConfig, load_config
from posbench.config_loader import from_dict
from posbench.errors import ConfigError
from posbench.model.flops import model_stats

# (name, params with vocab 65536 and tied embeddings) from the presets table
PRESETS = {"tiny": 59e6, "small": 164e6, "medium": 470e6, "large": 1.21e9}


@pytest.mark.parametrize("size,expected", PRESETS.items())
def test_preset_parameter_counts(size, expected):
    cfg = load_config(model_size=size, pe_type="rope")
    stats = model_stats(cfg.model, cfg.pe, "cpu")
    assert abs(stats.params_total - expected) / expected < 0.02
    # independent count: embedding + per layer (4 d^2 attention + 3 d d_ff SwiGLU + 2 d norms + 2 hd qk-norm)
    m = cfg.model
    per_layer = 4 * m.d_model ** 2 + 3 * m.d_model * m.d_ff + 2 * m.d_model + 2 * m.head_dim
    assert stats.params_total == m.vocab_size * m.d_model + m.n_layers * per_layer + m.d_model


def test_flops_formula_by_hand():
    cfg = load_config(model_size="tiny", pe_type="alibi")
    s = model_stats(cfg.model, cfg.pe, "cuda")
    m = cfg.model
    matmul = m.n_layers * (4 * m.d_model ** 2 + 3 * m.d_model * m.d_ff) + m.vocab_size * m.d_model
    assert s.params_matmul == matmul
    assert s.flops_per_token_train == 6 * matmul + 12 * m.n_layers * m.d_model * m.seq_len
    assert s.kernels == ["flex"] * 6


def test_yaml_files_merge_left_to_right_then_overrides(tmp_path):
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text("model: {d_model: 128, n_heads: 4, n_layers: 3}\npe: {name: rope, theta: 500000}\n")
    b.write_text("model: {n_layers: 5}\n")
    cfg = load_config([a, b], ["model.n_heads=8", "pe.scaling.name=yarn", "pe.scaling.factor=4"])
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads) == (128, 5, 8)
    assert cfg.pe.theta == 500000.0 and cfg.pe.scaling.name == "yarn" and cfg.pe.scaling.factor == 4.0


def test_shortcut_flags_map_onto_fields():
    a = load_config(model_size="small", pe_type="alibi")
    b = load_config([CONFIG_DIR / "model" / "small.yaml"], ["pe.name=alibi"])
    assert a == b and a.model.d_model == 768 and a.pe.name == "alibi"


def test_changing_pe_name_drops_previous_variant_options(tmp_path):
    f = tmp_path / "rope.yaml"
    f.write_text("pe: {name: rope, theta: 500000}\n")
    cfg = load_config([f], pe_type="alibi")
    assert cfg.pe.name == "alibi" and not hasattr(cfg.pe, "theta")


def test_numbers_in_yaml_and_cli_forms():
    cfg = load_config(overrides=["model.init_std=1e-2", "model.vocab_size=1e3"])
    assert cfg.model.init_std == 0.01 and cfg.model.vocab_size == 1000


def test_round_trip_through_yaml(tmp_path):
    cfg = load_config(model_size="tiny", overrides=["pe.name=hybrid"])
    path = tmp_path / "config.yaml"
    path.write_text(cfg.to_yaml())
    assert load_config([path]) == cfg


@pytest.mark.parametrize("overrides,message", [
    (["pe.name=alibii"], "did you mean `alibi`"),
    (["model.d_model=100", "model.n_heads=8"], "not divisible by model.n_heads"),
    (["model.d_model=40", "model.n_heads=8", "pe.name=rope"], "must be an even integer"),  # head dim 5
    (["model.d_model=9", "model.n_heads=1", "pe.name=sinusoidal"], "needs an even model.d_model"),
    (["model.n_layers=-2"], "model.n_layers must be a positive integer"),
    (["model.d_modle=256"], "did you mean `d_model`"),
    (["trian.steps=3"], "unknown config key `trian`"),
    (["model.d_model=abc"], "model.d_model: expected an integer"),
    (["model.tie_embeddings=maybe"], "expected true/false"),
    (["pe.name=alibi", "pe.theta=10"], "unknown config key `pe.theta`"),
    (["model.attention=flesh"], "did you mean `flex`"),
    (["pe.name=learned", "pe.max_positions=0"], "pe.max_positions must be >= 1"),
    (["pe.name=hybrid", "pe.pattern=[{name: learned}]"], "act inside attention"),
    (["model.dropout=1.5"], "model.dropout must be in [0, 1)"),
])
def test_bad_configurations_raise_clear_errors(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(overrides=overrides)


def test_even_head_dim_is_accepted():
    assert load_config(overrides=["model.d_model=48", "model.n_heads=8", "pe.name=rope"]).model.head_dim == 6


def test_unknown_model_preset():
    with pytest.raises(ConfigError, match="did you mean `tiny`"):
        load_config(model_size="tiyn")


def test_derived_values_are_not_loadable():
    assert ModelConfig(d_model=64, n_heads=4).head_dim == 16
    with pytest.raises(ConfigError, match="unknown config key `model.head_dim`"):
        from_dict(RunConfig, {"model": {"head_dim": 3}})


def test_cli_list_pe_types_and_errors():
    out = subprocess.run([sys.executable, "train.py", "--list-pe-types"], capture_output=True, text=True,
                         check=True).stdout
    from posbench.pe import PES

    # every registered PE once, indented under the heading of its own family (its `kind`)
    family, seen = None, {}
    for line in out.splitlines()[:-1]:
        if line and not line.startswith(" "):
            family = line.split(":")[0]
        elif line.strip():
            seen[line.split()[0]] = family
    assert seen == {name: cls.kind for name, cls in PES.classes().items()}
    assert seen["alibi"] == "bias" and seen["rope"] == "rotary"
    assert out.splitlines()[-1] == f"({len(seen)} positional encodings)"
    bad = subprocess.run([sys.executable, "train.py", "pe.name=ropee", "--print-config"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "did you mean `rope`" in bad.stderr


def test_describe_model_script():
    out = subprocess.run([sys.executable, "scripts/describe_model.py", "--model-size", "tiny", "--pe-type",
                          "alibi"], capture_output=True, text=True, check=True).stdout
    assert "58,727,680" in out and "flex x6" in out


def test_a_config_file_with_an_equals_sign_in_its_name_is_read_as_a_file(tmp_path, monkeypatch):
    """A positional naming an existing file is that file, `=` or not; other `key=value` text is an override."""
    from posbench.cli.data import _config, _parser
    from posbench.config import config_from_args, config_parser

    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr=3e-3.yaml").write_text("optim:\n  lr: 3.0e-3\n")
    args = config_parser("t").parse_args(["lr=3e-3.yaml", "model.d_model=96", "--model-size", "nano"])
    cfg = config_from_args(args)
    assert cfg.optim.lr == 3e-3 and cfg.model.d_model == 96
    (tmp_path / "root=here.yaml").write_text("data:\n  root: here\n")
    assert _config(_parser().parse_args(["info", "root=here.yaml"])).root == "here"
    with pytest.raises(ConfigError, match="unknown config key `nothere"):
        config_from_args(config_parser("t").parse_args(["nothere=1.yaml"]))  # no such file: an override


def _config_classes():
    import dataclasses
    import importlib
    import pkgutil

    import posbench

    for info in pkgutil.walk_packages(posbench.__path__, "posbench."):
        if ".app" in info.name:  # the Streamlit pages import streamlit at module level
            continue
        if ".interop.hf_remote" in info.name:  # remote-code templates: they import the zoo an export writes beside them
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            for cls in [value, *vars(value).values()] if isinstance(value, type) else []:
                if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == info.name:
                    yield cls


def test_every_config_validates_in_check_alone():
    """One validation hook: a config's own fields are checked in `check()` (Checked runs it when the value is built),
    never in a `__post_init__` of its own; what needs the model is `check_model` on PEs and architectures."""
    from posbench.config_loader import Checked

    checked = [cls for cls in _config_classes() if issubclass(cls, Checked)]
    assert {"ModelConfig", "TrainConfig", "PEConfig", "TaskConfig", "ArchConfig", "ScalingConfig"} <= \
        {c.__name__ for c in checked}
    own = [c.__qualname__ for c in _config_classes() if "__post_init__" in vars(c)]
    assert own == [], f"validate in check(), not __post_init__: {own}"
    assert not any(hasattr(c, "validate") for c in checked)


def test_a_task_with_its_own_check_still_checks_its_ranges():
    from posbench.data.tasks import get_task_class

    for name in ("copy_distance", "addition", "mqar"):  # each overrides check() and calls super().check()
        with pytest.raises(ConfigError, match="ood_range"):
            get_task_class(name).Config(id_range=(4, 8), ood_range=(6, 12))
