"""The one Registry: the registered name is written once and reaches the class and its Config; derived
Configs pickle (spawned study/sweep workers receive them); unknown names fail with the nearest one."""

import pickle
from dataclasses import dataclass, fields

import pytest

from posbench.config_loader import from_dict
from posbench.errors import ConfigError
from posbench.model.arch import ARCHS
from posbench.pe import PES, PEConfig, PositionalEncoding
from posbench.registry import Registry


def test_the_registered_name_reaches_the_class_and_its_config():
    for name in PES.names():
        cls = PES.get(name)
        assert cls.name == name and cls.Config().name == name
        assert cls.Config.__qualname__ == f"{cls.__qualname__}.Config"


@pytest.mark.parametrize("cfg", [PES.get("rope").Config(), PES.get("sininit").Config(), PES.get("prope").Config(),
                                 PES.get("none").Config(), ARCHS.get("mamba")()])
def test_derived_configs_pickle(cfg):
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and type(back) is type(cfg)


def test_a_variant_without_options_needs_no_config_and_loads_polymorphically():
    cfg = from_dict(PEConfig, {"name": "none"}, "pe")
    assert type(cfg) is PES.get("none").Config and [f.name for f in fields(cfg)] == ["name"]


def test_a_config_that_writes_the_name_again_is_refused():
    reg = Registry("thing")

    with pytest.raises(TypeError, match="declares `name`"):
        @reg.register("twice")
        class Twice(PositionalEncoding):
            summary = "x"

            @dataclass
            class Config(PEConfig):
                name: str = "twice"


def test_unknown_names_name_the_nearest():
    with pytest.raises(ConfigError, match=r"unknown positional encoding `alibj` at pe.name \(did you mean `alibi`"):
        PES.get("alibj")


def test_a_new_variant_file_is_found_without_editing_a_list(tmp_path, monkeypatch):
    """import_members, as every package of variants calls it: each module of the package is imported in name
    order, so a file dropped in registers its class; posbench.pe imports each of its own files the same way."""
    import importlib
    import sys
    from pathlib import Path

    import posbench.pe

    package = tmp_path / "plugins_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from posbench.registry import Registry, import_members\n\n"
                                         "PLUGINS = Registry('plugin')\nimport_members(__name__, __path__)\n")
    for stem, name in (("zeta", "z"), ("alpha", "a"), ("mid", "m")):
        (package / f"{stem}.py").write_text(f"from plugins_pkg import PLUGINS\n\n\n@PLUGINS.register('{name}')\n"
                                            f"class {stem.title()}:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert list(importlib.import_module("plugins_pkg").PLUGINS) == ["a", "m", "z"]  # by module name
    finally:
        for module in [m for m in sys.modules if m.split(".")[0] == "plugins_pkg"]:
            sys.modules.pop(module)
    modules = {p.stem for p in Path(posbench.pe.__file__).parent.glob("*.py")} - {"__init__"}
    assert {m.rsplit(".", 1)[-1] for m in sys.modules if m.startswith("posbench.pe.")} >= modules
