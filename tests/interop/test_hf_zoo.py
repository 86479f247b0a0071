"""The PE zoo the export ships (interop/hf_zoo.py): posbench's own modules, written flat with their posbench imports
made relative. The rewriting is held to hand-written expected text (only the import statements change, where they
stand, lazy and multi-line ones included); the forms that cannot be shipped flat are refused with the module and
line; the closure is every module of posbench.pe plus exactly the generic modules they import, found from the
imports, and the shipped files are what transformers' own loader reaches from pe_zoo.py."""

import ast
import sys
from pathlib import Path

import pytest

from posbench.errors import ConfigError
from posbench.interop import hf_zoo
from posbench.interop.hf_zoo import closure, flat_name, rewrite, zoo_files, zoo_roots

SOURCE = '''"""A module.

from posbench.errors import ConfigError   (a docstring line, not code: kept)
"""
from __future__ import annotations

import torch

from posbench.pe.encoding import (PES,
                                  PEConfig as Basé)  # noqa: F401 (columns count bytes)
from posbench.errors import ConfigError


def lazy():
    if True:
        from posbench.pe.rope import RoPE  # why: a cycle
    return RoPE
'''

REWRITTEN = '''"""A module.

from posbench.errors import ConfigError   (a docstring line, not code: kept)
"""
from __future__ import annotations

import torch

from .pe_encoding import PES, PEConfig as Basé  # noqa: F401 (columns count bytes)
from .errors import ConfigError


def lazy():
    if True:
        from .pe_rope import RoPE  # why: a cycle
    return RoPE
'''


@pytest.fixture(scope="module")
def shipped() -> dict[str, str]:
    return zoo_files()


def test_rewrite_makes_posbench_imports_relative_and_keeps_every_other_line():
    assert rewrite(SOURCE, "m") == REWRITTEN


@pytest.mark.parametrize("module, stem", [("posbench.pe.rope", "pe_rope"), ("posbench.errors", "errors"),
                                          ("tests.pe.toy_pe", "tests_pe_toy_pe")])
def test_flat_names(module, stem):
    assert flat_name(module) == stem


@pytest.mark.parametrize("line, error", [
    ("import posbench.errors", r"m, line 2: `import posbench.errors` cannot be shipped"),
    ("from posbench.pe import PES", r"m, line 2: `from posbench.pe import \.\.\.` imports a package"),
    ("x = 1; from posbench.errors import ConfigError", "m, line 2: an import of posbench shares its line"),
])
def test_forms_that_cannot_be_shipped_flat_are_refused_with_the_line(line, error):
    with pytest.raises(ConfigError, match=error):
        rewrite(f"import torch\n{line}\n", "m")


def test_the_closure_is_every_pe_module_and_the_generic_modules_they_import():
    import posbench.pe

    roots = zoo_roots()
    package = {f"posbench.pe.{p.stem}" for p in Path(posbench.pe.__file__).parent.glob("*.py")} - {
        "posbench.pe.__init__"}
    assert package <= set(roots) and set(closure(roots)) == package | {
        "posbench.errors", "posbench.config_loader", "posbench.registry", "posbench.yaml_io",
        "posbench.identity_fields"}


def test_a_module_registered_from_outside_posbench_is_a_root(monkeypatch, tmp_path):
    """A plug-in PE's module (here one written at test time) is shipped with its imports, with no list to edit."""
    (tmp_path / "plugin_pe.py").write_text("from posbench.pe.bias import BiasPE\n\n\nclass Plugin(BiasPE):\n"
                                           "    summary = 'a plug-in'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import plugin_pe

    from posbench.pe import PES

    PES.register("plugin_zoo_test")(plugin_pe.Plugin)
    try:
        files = zoo_files()
    finally:
        PES.unregister("plugin_zoo_test")
        sys.modules.pop("plugin_pe")
    assert files["plugin_pe.py"] == ("from .pe_bias import BiasPE\n\n\nclass Plugin(BiasPE):\n"
                                     "    summary = 'a plug-in'\n")
    assert "from .plugin_pe import Plugin  # noqa: F401" in files["pe_zoo.py"].splitlines()


def test_no_shipped_file_imports_posbench_and_pe_zoo_reaches_them_all(shipped, tmp_path):
    """As transformers' loader reads them: its absolute imports (which it requires installed) and the files it
    copies, following `from .name import` from pe_zoo.py."""
    dynamic = pytest.importorskip("transformers.dynamic_module_utils")

    for name, text in shipped.items():
        (tmp_path / name).write_text(text)
        assert not any(isinstance(node, (ast.Import, ast.ImportFrom)) and node.__dict__.get("level", 0) == 0
                       and (getattr(node, "module", None) or node.names[0].name).split(".")[0] == "posbench"
                       for node in ast.walk(ast.parse(text))), name
        assert "posbench" not in dynamic.get_imports(tmp_path / name), name
    reached = {Path(p).name for p in dynamic.get_relative_import_files(tmp_path / "pe_zoo.py")}
    assert reached | {"pe_zoo.py"} == {p.name for p in tmp_path.iterdir()}


def test_two_modules_on_one_flat_name_are_refused(monkeypatch):
    monkeypatch.setattr(hf_zoo, "zoo_roots", lambda: ["posbench.pe.rope"])
    with pytest.raises(ConfigError, match=r"would both be shipped as pe_rope\.py"):
        zoo_files({"pe_rope"})


def test_pe_zoo_imports_the_names_the_decoder_reads(shipped):
    """What the decoder shell's files import from pe_zoo is there (read from the shell's own source)."""
    shell = sorted((Path(hf_zoo.__file__).parent / "hf_remote").glob("*.py"))
    wanted = {alias.name for path in shell for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.ImportFrom) and node.module == "pe_zoo" for alias in node.names}
    imported = {alias.name for node in ast.parse(shipped["pe_zoo.py"]).body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert wanted and wanted <= imported
