"""requirements.lock pins what requirements.txt and pyproject.toml allow, and the README installs through it.

A range the lock does not satisfy, or a requirement the lock forgot, would let a fresh machine install
something CI never ran: that is how an upstream release once broke the README's own test command.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import lock  # noqa: E402
from readme_blocks import block  # noqa: E402

# Left to the README's torch step or to optional GPU extras that never install (or run: the `kernels` extra's
# Triton kernels) on CPU.
NOT_LOCKED = {"torch", "flash-attn", "mamba-ssm", "liger-kernel", "cut-cross-entropy"}
# Majors that have broken, or could break, what we read of them (requirements.txt says why, line by line).
BOUNDED = {"transformers", "lm-eval", "streamlit", "datasets", "wandb"}
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines() -> list[Requirement]:
    out = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            out.append(Requirement(line))
    return out


def pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    return [Requirement(t) for t in texts]


def locked_for(python: str) -> dict[str, str]:
    """name -> version the lock gives on this Python (markers evaluated as pip would on Linux x86-64)."""
    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}  # fmt: skip
    pins: dict[str, str] = {}
    for _, lines in lock.entries(lock.LOCK.read_text()):
        req = Requirement(lines.splitlines()[0].split("  #")[0])
        if req.marker is None or Marker(str(req.marker)).evaluate(env):
            (version,) = [s.version for s in req.specifier]
            assert norm(req.name) not in pins, f"{req.name} pinned twice for Python {python}"
            pins[norm(req.name)] = version
    return pins


def test_every_lock_entry_is_an_exact_pin():
    for name, lines in lock.entries(lock.LOCK.read_text()):
        first = lines.splitlines()[0]
        assert re.match(r"^[A-Za-z0-9._-]+==[^\s;]+( ; .+)?$", first), f"not an exact pin: {first!r}"
        assert not lock.UNPINNED.match(name), f"{name} is the README torch step's to choose, not the lock's"


@pytest.mark.parametrize("python", PYTHONS)
def test_the_lock_satisfies_every_range_we_declare(python):
    pins = locked_for(python)
    for req in requirement_lines() + pyproject_requirements():
        name = norm(req.name)
        if name in NOT_LOCKED or name == "posbench":
            continue
        assert name in pins, f"{req} is declared but not in requirements.lock (Python {python})"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]} on Python {python}, outside the declared range {req}"
        )


def test_packages_whose_next_major_can_break_us_have_upper_bounds():
    for req in requirement_lines() + pyproject_requirements():
        if norm(req.name) in BOUNDED:
            assert any(s.operator in ("<", "<=", "~=") for s in req.specifier), f"{req} has no upper bound"


def test_the_readme_installs_through_the_lock():
    install = block("install")
    pip_installs = re.findall(r"pip install [^&]+", install)
    assert pip_installs, install
    for command in pip_installs:
        assert "-c requirements.lock" in command, f"`{command.strip()}` installs without the lock"
    assert lock.torch_requirement() in install
