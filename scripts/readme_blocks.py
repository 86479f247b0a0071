#!/usr/bin/env python
"""The README's command blocks, by tag: the README is the one source of the commands CI runs.

A fenced code block is tagged by an HTML comment (invisible when rendered) on the line before its fence:

    <!-- readme: system -->       system packages some tests need (CI runs it verbatim where apt-get exists)
    <!-- readme: install -->      sets up everything for the main job and the tests (CI runs it verbatim)
    <!-- readme: test -->         runs the fast tests (CI runs it verbatim)
    <!-- readme: test-slow -->    runs the slow integration tests (CI runs it verbatim, after the fast ones)
    <!-- readme: runnable -->     needs no download; tests/docs/test_readme.py runs each one and checks its exit code

    python scripts/readme_blocks.py install        # prints the block's text, for `bash -c`

Standard library only: CI runs it before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
TAG = re.compile(r"^<!--\s*readme:\s*([a-z-]+)\s*-->\s*$")
FENCE = re.compile(r"^(```|~~~)")


def blocks(readme: Path = README) -> list[tuple[str, str]]:
    """(tag, text) of every tagged block, in README order."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        tag = TAG.match(lines[i].strip())
        if tag:
            if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
                raise ValueError(f"{readme}:{i + 1}: `{lines[i].strip()}` must be followed directly by a ``` fence")
            fence = FENCE.match(lines[i + 1]).group(1)
            end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith(fence)), None)
            if end is None:
                raise ValueError(f"{readme}:{i + 2}: code block never closed")
            found.append((tag.group(1), "\n".join(lines[i + 2 : end])))
            i = end
        i += 1
    return found


def block(tag: str, readme: Path = README) -> str:
    """The one block with this tag (system, install, test and test-slow must be unique: CI runs exactly one of each)."""
    texts = [text for t, text in blocks(readme) if t == tag]
    if len(texts) != 1:
        raise ValueError(f"{readme}: expected exactly one `<!-- readme: {tag} -->` block, found {len(texts)}")
    return texts[0]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        print(block(argv[0]))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
