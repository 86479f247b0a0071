"""The test tiers stay true: every file the smoke tier names exists (a moved or renamed test file would silently
leave the tier), and the README offers the tier with the command that selects it."""

from pathlib import Path

from tests.conftest import SMOKE, TESTS

ROOT = Path(__file__).resolve().parents[2]


def test_every_smoke_file_exists():
    missing = sorted(name for name in SMOKE if not (TESTS / name).is_file())
    assert not missing, f"tests/conftest.py SMOKE names files that do not exist: {missing}"


def test_the_readme_gives_the_smoke_command():
    assert 'python -m pytest tests -m "smoke and not slow" -n 2' in (ROOT / "README.md").read_text()
