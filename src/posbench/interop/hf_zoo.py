"""posbench's own PE modules, written into an export directory as transformers remote code.

The exported decoder (hf_remote/modeling_posbench.py) computes its PE with posbench's classes themselves, not a
second implementation: every module of `posbench.pe` and the module of every class registered in `PES` (a plug-in
PE, a test's toy PE) are the roots; their `posbench` imports, lazy ones included, are followed (`ast`) to the
closure of modules they need (the generic ones: errors, config_loader, registry, yaml_io). A new PE file, or a new
hook of the contract, is therefore shipped with no list to edit.

transformers' loader (`dynamic_module_utils`) copies a remote module and, recursively, the files it imports as
`from .name import x` from the same folder, flat, and refuses absolute imports of packages that are not installed.
So each module is written flat under its dotted name less `posbench.` with dots as underscores (`posbench.pe.rope`
as module `pe_rope`, `tests.pe.toy_pe` as `tests_pe_toy_pe`), and each `from posbench.x.y import a` statement is
replaced, at its own line and indentation, by `from .x_y import a`; every other line is kept byte for byte.
`pe_zoo.py`, written beside them, imports every root (their `register` decorators fill the shipped `PES`, as
`posbench.pe`'s `import_members` does in the package) and the names the decoder reads (`ZOO_NAMES`).
Refused, with the module and line: `import posbench...` and `from posbench.<package> import ...` (a package's
`__init__` is not shipped: import from the module that defines the name), and an import sharing its line with other
code (transformers' loader reads imports by line).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import pkgutil
from pathlib import Path

from posbench.errors import ConfigError

PACKAGE = "posbench"
ZOO_FILE = "pe_zoo.py"  # the generated module the decoder imports the zoo from
# the posbench names the decoder reads, by module: the registry, the contract's dispatch and the strict loader
ZOO_NAMES = {"posbench.pe.encoding": ("PES", "LogitsMod", "PEConfig", "PEContext", "PositionRangeError",
                                      "attention_bias"),
             "posbench.config_loader": ("from_dict",)}


def flat_name(module: str) -> str:
    """The file stem a module is shipped under: `posbench.pe.rope` -> `pe_rope`, `tests.pe.toy` -> `tests_pe_toy`."""
    return module.removeprefix(f"{PACKAGE}.").replace(".", "_")


def module_file(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ConfigError(f"module `{module}` has no Python source file to ship with the export")
    return Path(spec.origin)


def is_package(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.submodule_search_locations is not None


def ours(name: str | None) -> bool:
    return name is not None and (name == PACKAGE or name.startswith(f"{PACKAGE}."))


def posbench_imports(tree: ast.AST, module: str) -> list[ast.ImportFrom]:
    """Every `from posbench.<module> import ...` of a module's tree, lazy ones included; ConfigError for a form
    that cannot be shipped flat."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(ours(alias.name) for alias in node.names):
            raise ConfigError(f"{module}, line {node.lineno}: `import {node.names[0].name}` cannot be shipped as "
                              "remote code; write `from <module> import <name>`")
        if isinstance(node, ast.ImportFrom) and node.level == 0 and ours(node.module):
            if is_package(node.module):
                raise ConfigError(f"{module}, line {node.lineno}: `from {node.module} import ...` imports a "
                                  "package, whose __init__ is not shipped with the export; import from the module "
                                  "that defines the name")
            found.append(node)
    return found


@functools.cache
def scanned(module: str, path: Path, stamp: tuple[int, int]) -> tuple[str, tuple[ast.ImportFrom, ...], str]:
    """(source, its posbench imports, its rewritten text) of a module file, parsed once per version of the file
    (`stamp`: its mtime and size): every export in a process reads the same few thousand lines."""
    source = path.read_text(encoding="utf-8")
    nodes = tuple(posbench_imports(ast.parse(source), module))
    return source, nodes, rewritten(source, module, nodes)


def scan(module: str) -> tuple[str, tuple[ast.ImportFrom, ...], str]:
    path = module_file(module)
    st = path.stat()
    return scanned(module, path, (st.st_mtime_ns, st.st_size))


def closure(roots: list[str]) -> dict[str, str]:
    """Module name -> its source, for `roots` and every posbench module they import, recursively."""
    sources: dict[str, str] = {}
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in sources:
            continue
        sources[module], nodes, _ = scan(module)
        todo += [node.module for node in nodes]
    return sources


def rewrite(source: str, module: str) -> str:
    """`source` with each `from posbench.x import a` statement replaced by `from .x import a` (flat_name), where it
    stands; every other line unchanged."""
    return rewritten(source, module, posbench_imports(ast.parse(source), module))


def rewritten(source: str, module: str, nodes) -> str:
    lines = source.splitlines(keepends=True)
    for node in sorted(nodes, key=lambda n: n.lineno, reverse=True):
        # ast's column offsets count UTF-8 bytes
        first, last = lines[node.lineno - 1].encode(), lines[node.end_lineno - 1].encode()
        before, after = first[:node.col_offset].decode(), last[node.end_col_offset:].decode()
        if before.strip() or after.strip().split("#")[0].strip(" ;"):
            raise ConfigError(f"{module}, line {node.lineno}: an import of posbench shares its line with other code; "
                              "put it on a line of its own to ship it as remote code")
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
        lines[node.lineno - 1:node.end_lineno] = [f"{before}from .{flat_name(node.module)} import {names}{after}"]
    return "".join(lines)


def first_public_name(source: str, module: str) -> str:
    """A name a module defines at its top level: what `pe_zoo.py` imports it by (for its registrations)."""
    for node in ast.parse(source).body:
        names = [node.name] if isinstance(node, (ast.ClassDef, ast.FunctionDef)) else \
            [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        for name in names:
            if not name.startswith("_"):
                return name
    raise ConfigError(f"module `{module}` defines no public name at its top level to import it by")


def zoo_roots() -> list[str]:
    """Every module of posbench.pe (what its import_members imports) and the module of every registered PE."""
    import posbench.pe
    from posbench.pe import PES

    package = sorted(f"posbench.pe.{m.name}" for m in pkgutil.iter_modules(posbench.pe.__path__))
    plugins = sorted({cls.__module__ for cls in PES.classes().values()} - set(package))
    return package + plugins


def zoo_module(roots: list[str], sources: dict[str, str]) -> str:
    lines = ['"""Written by posbench\'s export (posbench.interop.hf_zoo): posbench\'s PE modules, shipped beside this',
             "file, imported for their registrations in PES, and the names the decoder reads.\"\"\"", ""]
    lines += [f"from .{flat_name(m)} import {', '.join(names)}  # noqa: F401" for m, names in ZOO_NAMES.items()]
    lines += [f"from .{flat_name(m)} import {first_public_name(sources[m], m)}  # noqa: F401" for m in roots]
    return "\n".join(lines) + "\n"


def zoo_files(reserved: set[str] = frozenset()) -> dict[str, str]:
    """File name -> text of the shipped zoo: the closure of zoo_roots() rewritten flat, and pe_zoo.py. `reserved`:
    the stems already taken in the directory (the decoder's own files)."""
    roots = zoo_roots()
    sources = closure(roots + list(ZOO_NAMES))
    files: dict[str, str] = {}
    owner: dict[str, str] = {}
    for module in sorted(sources):
        stem = flat_name(module)
        if stem in owner or stem in reserved | {Path(ZOO_FILE).stem}:
            raise ConfigError(f"modules `{module}` and `{owner.get(stem, stem)}` would both be shipped as {stem}.py; "
                              "rename one of them")
        owner[stem] = module
        files[f"{stem}.py"] = scan(module)[2]
    files[ZOO_FILE] = zoo_module(roots, sources)
    return files
