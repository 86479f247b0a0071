"""Numbers the README states about the code, recomputed from the code: the preset table's parameter counts
are what `scripts/describe_model.py` counts (RoPE, the preset's own vocabulary)."""

import re
from pathlib import Path

import pytest

from posbench.config import load_config
from posbench.model.flops import model_stats

README = Path(__file__).resolve().parents[2] / "README.md"
UNITS = {"K": 1e3, "M": 1e6, "B": 1e9}


def preset_rows() -> dict[str, str]:
    """preset -> its `params` cell in the README's preset table."""
    lines = README.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| preset |"))
    col = [c.strip() for c in lines[header].split("|")].index(next(
        c.strip() for c in lines[header].split("|") if c.strip().startswith("params")))
    rows = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.split("|")]
        rows[cells[1]] = cells[col]
    return rows


@pytest.mark.parametrize("preset", ["nano", "tiny", "small", "medium", "large"])
def test_preset_table_parameter_counts(preset):
    cfg = load_config(model_size=preset, pe_type="rope")
    counted = model_stats(cfg.model, cfg.pe, "cpu").params_total
    stated = preset_rows()[preset]
    exact = re.match(r"([\d,]{5,})\b", stated)
    if exact:
        assert int(exact.group(1).replace(",", "")) == counted, stated
        return
    number, unit = re.match(r"([\d.]+)([KMB])\b", stated).groups()
    digits = len(number.split(".")[1]) if "." in number else 0
    assert float(number) == round(counted / UNITS[unit], digits), f"README says {stated}, the model has {counted:,}"
