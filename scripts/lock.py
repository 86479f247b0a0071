#!/usr/bin/env python
"""The install lock: what a fresh machine gets, and how to move it forward.

`requirements.txt` (and pyproject.toml's dependencies) keep honest *ranges*; `requirements.lock` pins every
package the README's install block installs, transitive ones included, to the versions the test suite passed
with. The README installs with `-c requirements.lock` (pip constraints), so a new release upstream cannot
change what a fresh machine gets; CI runs the same block.

    python scripts/lock.py check      # newest allowed versions in a fresh venv: what moved since the lock,
                                      # then the interop, app and data tests against them
    python scripts/lock.py refresh    # resolve the newest allowed versions for Python 3.10-3.13, install them
                                      # in a fresh venv, run the README's test commands, and write
                                      # requirements.lock only if every test passes

Run `check` before `refresh`: it shows what changes and whether the borders (transformers, lm_eval,
streamlit, datasets) still hold. Both need the package registry and take minutes (refresh: the whole suite).
The resolver is uv (pinned below, installed into the scratch venv only): pip has no universal, multi-Python
lock. torch is not in the lock: the README installs it first (CPU wheel here, a CUDA build of the user's
choice elsewhere); its CPU dependencies are pinned like the rest.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from readme_blocks import README, block  # noqa: E402

LOCK = ROOT / "requirements.lock"
REQUIREMENTS = ROOT / "requirements.txt"
UV = "uv==0.13.9"
PYTHONS = "3.10"  # the oldest Python the lock must serve (pyproject requires-python); markers fork above it
# Installed separately by the README (the build decides CPU/CUDA): never pinned by the lock.
UNPINNED = re.compile(r"^(torch|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)$")
CHECK_TESTS = [
    "tests/interop/test_hf_export.py",
    "tests/interop/test_hf_export_remote.py",
    "tests/interop/test_lm_eval_model.py",
    "tests/app",
    "tests/data",
]


class UsageError(Exception):
    """The README does not say what the lock needs (exit code 2, one line): nothing was installed or written."""


def torch_requirement(readme: Path = README) -> str:
    """The torch pin of the README's install block (`pip install torch==X ...`), the one the suite runs on."""
    found = re.search(r"pip install (torch==[^\s&]+)", _block("install", readme))
    if not found:
        raise UsageError(f"{readme}'s install block installs no `torch==VERSION`; the lock needs that pin")
    return found.group(1)


def _block(tag: str, readme: Path) -> str:
    try:
        return block(tag, readme)
    except (OSError, ValueError) as e:  # no such block, or no README: its message names the file
        raise UsageError(str(e)) from None


def entries(text: str) -> list[tuple[str, str]]:
    """(normalised name, block of lines) per pinned package of a uv/pip-compile output, annotations kept."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith((" ", "#")) or not line.strip():
            if out:
                out[-1][1].append(line)
            continue
        name = re.split(r"[=<>;\s\[]", line, maxsplit=1)[0]
        out.append((name.lower().replace("_", "-"), [line]))
    return [(name, "\n".join(lines).rstrip()) for name, lines in out]


def pinned(text: str) -> dict[str, list[str]]:
    """name -> the `==` versions the lock gives it (one per Python-version fork)."""
    pins: dict[str, list[str]] = {}
    for name, lines in entries(text):
        found = re.match(r"^[A-Za-z0-9._-]+==([^\s;]+)", lines)
        if found:
            pins.setdefault(name, []).append(found.group(1))
    return pins


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def venv(where: Path, python: str) -> Path:
    run([python, "-m", "venv", str(where)])
    return where / "bin" / "python"


def resolve(py: Path, torch: str, work: Path) -> str:
    """The newest versions requirements.txt allows, for every Python from PYTHONS up, torch held at the
    README's pin (its dependencies depend on it), torch and CUDA wheels then left out."""
    run([str(py), "-m", "pip", "install", "-q", UV])
    torch_pin = work / "torch.txt"
    torch_pin.write_text(torch + "\n")
    out = work / "resolved.txt"
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")
    run(
        [str(py.parent / "uv"), "pip", "compile", str(REQUIREMENTS), "--universal", "--python-version", PYTHONS,
         "--constraint", str(torch_pin), "--no-header", "--quiet", "-o", str(out)],
        cwd=ROOT, env=env,
    )  # fmt: skip
    kept = [lines for name, lines in entries(out.read_text()) if not UNPINNED.match(name) and name != "-e"]
    return "\n".join(kept) + "\n"


def install(py: Path, torch: str, lock: Path | None) -> None:
    """The README's install block, with or without the lock."""
    constraints = ["-c", str(lock)] if lock else []
    run([str(py), "-m", "pip", "install", "-q", torch, *constraints])
    upgrade = [] if lock else ["--upgrade", "--upgrade-strategy", "eager"]
    run([str(py), "-m", "pip", "install", "-q", *upgrade, "-r", str(REQUIREMENTS), *constraints], cwd=ROOT)


def installed(py: Path) -> dict[str, str]:
    """normalised name -> version of what the venv holds."""
    text = subprocess.run([str(py), "-m", "pip", "freeze", "--all", "--exclude-editable"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    pairs = (line.split("==", 1) for line in text.splitlines() if "==" in line)
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def moved(py: Path) -> list[tuple[str, str, str]]:
    """(package, locked versions, installed) where a fresh install of the newest versions differs. Lock entries
    this interpreter does not install (other Pythons, other platforms) are not differences."""
    locked = pinned(LOCK.read_text()) if LOCK.exists() else {}
    now = installed(py)
    rows = []
    for name in sorted(now):
        if UNPINNED.match(name) or name == "pip":
            continue
        have = now[name]
        if have not in locked.get(name, []):
            rows.append((name, ", ".join(locked.get(name, [])) or "-", have))
    return rows


def tests(py: Path, args: list[str]) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{py.parent}{os.pathsep}{env.get('PATH', '')}"
    print("+", "pytest", " ".join(args), flush=True)
    return subprocess.run([str(py), "-m", "pytest", *args], cwd=ROOT, env=env).returncode


def readme_test_commands(readme: Path = README) -> list[list[str]]:
    """The README's test blocks (fast, then slow), one pytest argument list per `python -m pytest ...` line.
    UsageError when there is none: a lock written after running no test would claim a suite that never ran (the
    test lines changed form, e.g. `pytest ...` or `make test`)."""
    out = []
    for line in (_block("test", readme) + "\n" + _block("test-slow", readme)).splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("python -m pytest"):
            out.append(line.split()[3:])
    if not out:
        raise UsageError(f"{readme}: its `test` and `test-slow` blocks hold no `python -m pytest ...` line, so refresh "
                         "would run no test before writing the lock; write the README's test commands in that form")
    return out


def check(python: str, readme: Path = README) -> int:
    torch = torch_requirement(readme)
    with tempfile.TemporaryDirectory(prefix="posbench-newest-") as tmp:
        py = venv(Path(tmp) / "venv", python)
        install(py, torch, lock=None)
        rows = moved(py)
        print(f"\nNewest allowed versions against {LOCK.name} ({len(rows)} differ):")
        print("| package | lock | newest |\n|---|---|---|")
        for name, old, new in rows:
            print(f"| {name} | {old} | {new} |")
        code = tests(py, ["-q", "-p", "no:cacheprovider", *CHECK_TESTS])
    print(f"\ninterop/app/data tests on the newest versions: {'pass' if code == 0 else f'FAIL (exit {code})'}")
    return code


def refresh(python: str, readme: Path = README) -> int:
    torch = torch_requirement(readme)
    commands = readme_test_commands(readme)  # before any venv: the README must say which tests gate the lock
    with tempfile.TemporaryDirectory(prefix="posbench-lock-") as tmp:
        work = Path(tmp)
        py = venv(work / "venv", python)
        body = resolve(py, torch, work)
        candidate = work / "requirements.lock"
        candidate.write_text(body)
        install(py, torch, lock=candidate)
        for args in commands:
            code = tests(py, args)
            if code != 0:
                print(f"\nthe suite failed (exit {code}) on the newest versions: {LOCK.name} left unchanged")
                return code
        version = subprocess.run([str(py), "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        header = (
            "# Every package the README's install block installs, pinned (pip constraints: `-c requirements.lock`).\n"
            f"# Written by `python scripts/lock.py refresh` on {date.today()}: resolved by {UV} for Python >= "
            f"{PYTHONS}\n# (markers fork per version), installed with {torch} and the README's test commands passed"
            f" on Python {version}.\n# torch, triton and CUDA wheels are left to the README's torch step.\n"
            "# A dependency's reason is in requirements.txt; `# via` says who pulls in a transitive one.\n"
        )
        LOCK.write_text(header + body)
    print(f"\nwrote {LOCK.relative_to(ROOT)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["check", "refresh"])
    parser.add_argument("--python", default=sys.executable, help="interpreter for the scratch venv")
    parser.add_argument("--readme", type=Path, default=README,
                        help="the README whose install and test blocks the lock follows (default: the repository's)")
    args = parser.parse_args(argv)
    try:
        return (check if args.action == "check" else refresh)(args.python, args.readme)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
