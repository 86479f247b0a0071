"""Every function in src/posbench/training/ stays under 60 lines (def line to last line, decorators excluded), so
the loop and what it calls read one screen at a time: a longer one is split into named steps."""

import ast
from pathlib import Path

import pytest

TRAINING = Path(__file__).resolve().parents[2] / "src" / "posbench" / "training"
LIMIT = 60


def function_lengths(source: str) -> dict[str, int]:
    """`qualified name` -> lines, for every function and method at any depth of `source`."""
    found = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = getattr(child, "name", "")
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[prefix + name] = child.end_lineno - child.lineno + 1
            visit(child, prefix + name + "." if name else prefix)

    visit(ast.parse(source), "")
    return found


def test_the_counter_sees_nested_functions_and_methods():
    body = "\n".join(f"        x = {i}" for i in range(3))
    source = f"class A:\n    def m(self):\n        def inner():\n            pass\n{body}\n"
    assert function_lengths(source) == {"A.m": 6, "A.m.inner": 2}


@pytest.mark.parametrize("path", sorted(TRAINING.rglob("*.py")), ids=lambda p: p.name)
def test_no_function_in_training_reaches_60_lines(path):
    long = {name: n for name, n in function_lengths(path.read_text(encoding="utf-8")).items() if n >= LIMIT}
    assert not long, f"{path.name}: {long} reach {LIMIT} lines; split them into named steps"
