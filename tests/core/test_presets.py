"""`--help` of the study and sweep commands lists the presets that ship, read from configs/ (it went stale when it
was written by hand: three of nine study presets were named)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", ["study", "sweep"])
def test_help_lists_every_preset(kind):
    shipped = sorted(p.stem for p in (ROOT / "configs" / kind).glob("*.yaml"))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / f"{kind}.py"), "--help"], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout
    text = " ".join(out.split())  # argparse wraps the help text
    assert len(shipped) >= 4
    listed = text.split("preset name (", 1)[1].split(")", 1)[0].split(", ")
    assert listed == shipped
