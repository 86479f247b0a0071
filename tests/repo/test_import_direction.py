"""Lower layers import nothing from higher ones (a design rule), read from the source with `ast`, and no
module of the package imports itself through others (no import cycles).

Every import counts, including those inside functions: a lazy import is still a dependency, only a
later one. Relative imports are resolved against the importing module's package. Imports under
`if TYPE_CHECKING:` are for annotations and never run: the cycle test leaves them out (the direction
tests, stricter, still read them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "posbench"

# what may import what. model/ and pe/ build a network from typed settings: they know nothing of data,
# training, evaluation or the programs above them, and not of the run config's assembly module either
# (which imports every stage).
ABOVE_MODEL = ("posbench.data", "posbench.training", "posbench.evaluation", "posbench.studies", "posbench.sweeps",
               "posbench.grid", "posbench.app", "posbench.interop", "posbench.config", "posbench.cli")
# A stage's own config module may import its own stage and what lies below it, never the assembly
# module or a stage above it. Below the stages: config_loader and registry (generic, import nothing of ours but
# the bottom layer's errors).
STAGE_CONFIGS = {
    "model/model_config.py": ("posbench.model", "posbench.pe"),
    "data/data_config.py": ("posbench.data",),
    # and the bottom module whose one bound every thread count is checked against (threads.check_threads)
    "training/train_config.py": ("posbench.training", "posbench.threads"),
}
GENERIC = ("posbench.config_loader", "posbench.registry", "posbench.errors", "posbench.yaml_io",
           "posbench.identity_fields")


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


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_time_nodes(node: ast.AST):
    """Every node below `node` that can run: the bodies of `if TYPE_CHECKING:` are skipped (their `else` is not)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _run_time_nodes(other)
            continue
        yield child
        yield from _run_time_nodes(child)


def import_graph(root: Path = SRC) -> dict[str, dict[str, int]]:
    """module -> {module of the package it imports at run time (at any depth): first line}. `from pkg import
    name` is an edge to `pkg.name` when that is a module of ours, else to `pkg` (its __init__)."""
    paths = {module_name(p, root): p for p in sorted((root / "posbench").rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in _run_time_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in paths else mod for a in node.names]
            else:
                continue
            for target in targets:
                if target in paths and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit on deep chains)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                found.append(sorted(component))
    return found


def a_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """One cycle inside a strongly connected component, as `a.py:line -> b` steps (shortest back to the start)."""
    start, members = component[0], set(component)
    came_from = {start: None}
    queue = [start]
    for v in queue:  # breadth first from start until an edge leads back to it
        for w in graph[v]:
            if w == start:
                path = [v]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                path.reverse()
                return [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(path, path[1:] + [start])]
            if w in members and w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")


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


def test_the_grid_imports_none_of_the_programs_built_on_it():
    """grid/ is what studies and sweeps share: their cell kinds register into it from their own rooms."""
    files = sorted((PKG / "grid").rglob("*.py"))
    assert files
    assert violations(files, forbidden=("posbench.studies", "posbench.sweeps", "posbench.app", "posbench.cli",
                                        "posbench.interop", "posbench.gpucheck", "posbench.training")) == []


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


# Commands live together (a design rule): nothing outside posbench/cli imports it, except the shims that
# keep an old `python -m` path working; each shim holds nothing but a docstring and the guarded call, and
# nothing imports a shim.
CLI = ("posbench.cli",)
SHIMS = {"__main__.py", "data/prepare_fineweb.py", "evaluation/prepare_data.py", "app/__main__.py"}
# The bottom layer (design rules: an error carries its exit code; say a thing once; bounded at every border):
# errors carry exit codes, fileio writes atomically, stats summarises numbers (and refuses a value that is not a
# finite number with a DataError), yaml_io reads YAML bounded.
BOTTOM = {"errors.py": (), "fileio.py": ("posbench.errors",), "stats.py": ("posbench.errors",),
          "yaml_io.py": ("posbench.errors",)}


def test_nothing_outside_cli_imports_a_command():
    files = [p for p in sorted(PKG.rglob("*.py"))
             if "cli" not in p.relative_to(PKG).parts[:1] and p.relative_to(PKG).as_posix() not in SHIMS]
    assert files
    assert violations(files, forbidden=CLI) == []


@pytest.mark.parametrize("rel", sorted(SHIMS))
def test_shims_are_only_shims(rel):
    path = PKG / rel
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) else tree.body  # the docstring
    assert len(body) == 1 and isinstance(body[0], ast.If) and "__main__" in ast.unparse(body[0].test), \
        f"{rel}: a shim is a docstring and `if __name__ == '__main__':` only"
    assert {name for _, name in imports(path) if under(name, ("posbench",))} <= {
        f"posbench.cli.{m}" for m in ("main", "data", "app")}
    shim = module_name(path)
    users = [p for p in sorted(PKG.rglob("*.py")) if any(name == shim for _, name in imports(p))]
    assert users == [], f"{shim} is a shim: import posbench.cli.* instead"


@pytest.mark.parametrize("rel", sorted(BOTTOM))
def test_bottom_modules_import_nothing_of_ours(rel):
    path = PKG / rel
    assert path.is_file()
    assert violations([path], allowed=BOTTOM[rel]) == []


def test_data_layer_imports_no_command_and_no_assembly():
    """data/ sits below the run config's assembly module and every command."""
    files = [p for p in sorted((PKG / "data").rglob("*.py")) if p.relative_to(PKG).as_posix() not in SHIMS]
    assert violations(files, forbidden=CLI + ("posbench.config",)) == []


def test_no_import_cycles():
    """No module of posbench imports itself through others at run time (lazy imports inside functions count;
    those under `if TYPE_CHECKING:` do not): every strongly connected component of the graph is one module."""
    graph = import_graph()
    assert len(graph) > 50
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    report = "\n".join(f"{len(c)} modules in a cycle: {', '.join(c)}\n  e.g. " + "\n  ".join(a_cycle(graph, c))
                       for c in cycles)
    assert not cycles, "import cycles:\n" + report


def test_the_cycle_finder_sees_lazy_imports_and_skips_type_checking(tmp_path):
    """The checker itself: a lazy import closes a cycle, an annotation-only import does not."""
    pkg = tmp_path / "posbench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from posbench import b\n")
    (pkg / "b.py").write_text("def f():\n    from posbench.c import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from posbench.b import f\n"
                              "else:\n    from . import a\n")
    (pkg / "d.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from posbench import a\n")
    graph = import_graph(tmp_path)
    assert graph["posbench.c"] == {"posbench.a": 5} and graph["posbench.d"] == {}
    (cycle,) = [c for c in strongly_connected(graph) if len(c) > 1]
    assert cycle == ["posbench.a", "posbench.b", "posbench.c"]
    assert a_cycle(graph, cycle) == ["posbench.a (line 1) -> posbench.b", "posbench.b (line 2) -> posbench.c",
                                     "posbench.c (line 5) -> posbench.a"]
