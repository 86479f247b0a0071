"""Every module path, file name and dotted name the docs and docstrings quote exists.

Whoever carries the work on reads docs/architecture.md and the docstrings first; a name there that the code
no longer has sends them looking for something that was moved or deleted. The rules, for text in backticks:
- a path or file name (ending in .py/.yaml/.md/.sh/.sbatch/.toml, or a folder ending in `/`) names a file
  found from the repository root, from src/posbench/ or one of its packages, or (a bare file name) anywhere,
  or a file the tools write at run time (its name is a string in the code); `my_*` names are examples;
- `posbench.a.b` imports, or is an attribute of what imports; `pkg/mod.NAME` names an attribute of that file;
- in docs/, a name with an underscore or a call `name()` occurs somewhere in the code, configs or scripts.
Comments never cite an issue number: issues close, the code stays.
"""

from __future__ import annotations

import ast
import importlib
import re
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "posbench"
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
PY = [
    p
    for p in sorted(p for d in ("src", "scripts", "tests") for p in (ROOT / d).rglob("*.py"))
    + [ROOT / "train.py", ROOT / "eval.py"]
    if p != Path(__file__).resolve()  # this file quotes the rules' own examples
]
QUOTED = re.compile(r"`([^`\n]+)`")
FILE_SUFFIXES = (".py", ".yaml", ".md", ".sh", ".sbatch", ".toml", ".txt", ".lock")


@cache
def all_files() -> frozenset[str]:
    skip = {".git", "__pycache__", ".pytest_cache", ".ruff_cache"}
    return frozenset(
        str(p.relative_to(ROOT)) + ("/" if p.is_dir() else "")
        for p in ROOT.rglob("*")
        if not skip & set(p.relative_to(ROOT).parts)
    )


@cache
def code_words() -> frozenset[str]:
    words: set[str] = set()
    for folder in ("src", "scripts", "tests", "configs"):
        for p in (ROOT / folder).rglob("*"):
            if p.suffix in (".py", ".yaml"):
                words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", p.read_text(encoding="utf-8")))
    return frozenset(words)


@cache
def code_strings() -> frozenset[str]:
    """Every string literal of src/ and scripts/: the names of files the tools write at run time."""
    found: set[str] = set()
    for folder in ("src", "scripts"):
        for p in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.add(node.value)
    return frozenset(found)


def expand_braces(text: str) -> list[str]:
    """`configs/model/{tiny,small}.yaml` -> both paths (shell brace expansion, one level)."""
    found = re.search(r"\{([^{}]*)\}", text)
    if not found:
        return [text]
    head, tail = text[: found.start()], text[found.end() :]
    return [p for alt in found.group(1).split(",") for p in expand_braces(head + alt + tail)]


def ours(text: str) -> bool:
    """A path into this repository, not a file of another project a doc cites (`megatron/mpu/layers.py`)."""
    first = text.split("/", 1)[0]
    return "/" not in text.rstrip("/") or (ROOT / first).exists() or (SRC / first).exists() or first == "posbench"


def path_exists(text: str) -> bool:
    text = text.rstrip(".,:;")
    if "{" in text:
        return all(path_exists(p) for p in expand_braces(text))
    if text.startswith(".") or not ours(text):
        return True  # relative to a folder the text names, or another project's file
    if Path(text.rstrip("/")).name.startswith("my_"):
        return True  # the docs' own example of a file to add (`pe/my_pe.py`)
    base = Path(text.rstrip("/")).name
    if "*" not in base and any(base in s for s in code_strings()):
        return True  # a file the tools write at run time (`config.yaml`, `.lock`, `data/raw/`)
    bases = ["", "src/", "src/posbench/"] + [f"src/posbench/{d.name}/" for d in SRC.iterdir() if d.is_dir()]
    files = all_files()
    if "/" not in text.rstrip("/"):  # a bare file or folder name (or glob): anywhere in the tree
        return any(fnmatch(Path(f.rstrip("/")).name, text.rstrip("/")) for f in files)
    pattern = re.compile(re.escape(text).replace(r"\*", "[^/]*") + ("$" if text.endswith("/") else "/?$"))
    return any(pattern.match(f[len(b) :]) for b in bases for f in files if f.startswith(b))


def dotted_exists(text: str) -> bool:
    parts = text.rstrip("()").split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def file_attribute_exists(text: str) -> bool:
    """`training/metrics.PEAK_BF16`: the file's top level defines the name."""
    path, name = text.rsplit(".", 1)
    candidates = [p for p in all_files() if p.endswith(path + ".py")]
    for c in candidates:
        tree = ast.parse((ROOT / c).read_text(encoding="utf-8"))
        for node in tree.body:
            targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
            names = {getattr(node, "name", None)} | {getattr(t, "id", None) for t in targets if t is not None}
            if name in names:
                return True
    return False


def problems(text: str, *, identifiers: bool) -> list[str]:
    out = []
    for quoted in QUOTED.findall(text):
        q = quoted.strip()
        if " " in q or "<" in q or "=" in q or q.startswith(("-", "$", "http", ".")):
            continue  # a command line, a placeholder, an override, a URL: not a name
        if q.startswith("posbench.") and re.fullmatch(r"[\w.]+(\(\))?", q):
            ok = dotted_exists(q)
        elif re.fullmatch(r"[\w./*-]+/[\w]+\.[A-Za-z_]\w*", q) and not q.endswith(FILE_SUFFIXES):
            ok = file_attribute_exists(q)
        elif q.endswith(FILE_SUFFIXES) or (q.endswith("/") and re.fullmatch(r"[\w./*{},-]+", q)):
            ok = path_exists(q)
        elif identifiers and re.fullmatch(r"[A-Za-z_]\w*(\(\))?", q) and ("_" in q.strip("_") or q.endswith("()")):
            ok = q.startswith("my_") or q.rstrip("()") in code_words()
        else:
            continue
        if not ok:
            out.append(q)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_names_quoted_in_docs_exist(doc):
    missing = problems(doc.read_text(encoding="utf-8"), identifiers=True)
    assert not missing, f"{doc.relative_to(ROOT)} quotes names the code does not have: {missing}"


def docstrings_and_comments(path: Path) -> str:
    source = path.read_text(encoding="utf-8")
    parts = [line.split("#", 1)[1] for line in source.splitlines() if "#" in line]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            parts.append(ast.get_docstring(node) or "")
    return "\n".join(parts)


def test_names_quoted_in_docstrings_exist():
    missing = {}
    for path in PY:
        found = problems(docstrings_and_comments(path), identifiers=False)
        if found:
            missing[str(path.relative_to(ROOT))] = found
    assert not missing, f"docstrings/comments quote paths or modules that do not exist: {missing}"


def test_no_comment_cites_an_issue_number():
    cite = re.compile(r"\bissues?\s*#?\d+|\(issue\b", re.IGNORECASE)
    found = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in PY
        for line in docstrings_and_comments(path).splitlines()
        if cite.search(line)
    ]
    assert not found, "comments and docstrings cite issue numbers (say the reason instead):\n" + "\n".join(found)
