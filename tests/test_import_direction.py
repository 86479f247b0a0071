"""Lower layers import nothing from higher ones (DESIGN.md, style 13), read from the source with `ast`.

Every import counts, including those inside functions: a lazy import is still a dependency, only a
later one. Relative imports are resolved against the importing module's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "posbench"

# what may import what. model/ and pe/ build a network from typed settings: they know nothing of data,
# training, evaluation or the programs above them, and not of the run config's assembly module either
# (which imports every stage).
ABOVE_MODEL = ("posbench.data", "posbench.training", "posbench.evaluation", "posbench.studies", "posbench.sweeps",
               "posbench.app", "posbench.interop", "posbench.config", "posbench.cli")
# A stage's own config module may import its own stage and what lies below it, never the assembly
# module or a stage above it. Below the stages: config_loader and registry (generic, import nothing of ours).
STAGE_CONFIGS = {
    "model/model_config.py": ("posbench.model", "posbench.pe"),
    "data/data_config.py": ("posbench.data",),
    "training/train_config.py": ("posbench.training",),
}
GENERIC = ("posbench.config_loader", "posbench.registry")


def module_name(path: Path, root: Path = SRC) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path = SRC) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # `from . import x`, `from ..pe import y`
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from posbench import config` imports the module posbench.config
            found += [(node.lineno, f"{mod}.{alias.name}") for alias in node.names] if mod == "posbench" \
                else [(node.lineno, mod)]
    return found


def under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(paths, forbidden=None, allowed=None) -> list[str]:
    bad = []
    for path in paths:
        for line, name in imports(path):
            if not under(name, ("posbench",)):
                continue
            wrong = under(name, forbidden) if forbidden is not None else not under(name, allowed)
            if wrong:
                bad.append(f"{path.relative_to(SRC)}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("stage", ["model", "pe"])
def test_model_and_pe_import_nothing_above_them(stage):
    files = sorted((PKG / stage).rglob("*.py"))
    assert files
    assert violations(files, forbidden=ABOVE_MODEL) == []


@pytest.mark.parametrize("rel", sorted(STAGE_CONFIGS))
def test_stage_configs_import_only_their_stage_and_below(rel):
    path = PKG / rel
    assert path.is_file(), f"{rel}: each stage's settings live beside the stage"
    assert violations([path], allowed=STAGE_CONFIGS[rel] + GENERIC) == []


def test_generic_loader_imports_no_stage():
    assert violations([PKG / "config_loader.py", PKG / "registry.py"], allowed=GENERIC) == []


def test_the_reader_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: an import inside a function, a relative one and `from posbench import x`."""
    probe = tmp_path / "posbench" / "model" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f():\n    from posbench.data import loader\n\nfrom ..training import loop\n"
                     "from posbench import config\n")
    found = {name for _, name in imports(probe, tmp_path)}
    assert {"posbench.data", "posbench.training", "posbench.config"} <= found
