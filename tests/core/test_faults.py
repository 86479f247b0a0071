"""Fault injection (posbench/faults.py): unarmed it changes nothing; armed, it strikes only at the point its
variable names, and each fault does what it stands for (a NaN loss, a full disk inside torch.save, a crash with
half a checkpoint written)."""

import errno
import io
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posbench import faults

ROOT = Path(__file__).resolve().parents[2]


def test_unarmed_faults_hand_back_the_value_itself(monkeypatch):
    for fault in faults.FAULTS.values():
        monkeypatch.delenv(fault.env, raising=False)
    loss, f = torch.tensor(2.0), io.BytesIO()
    assert faults.inject("nan_loss", "3,0", loss) is loss
    assert faults.inject("full_disk", "3", f) is f
    assert faults.inject("crash_during_save", "3") is None  # and the process lives on


def test_a_nan_strikes_only_at_its_step_and_rank(monkeypatch):
    monkeypatch.setenv("POSBENCH_INJECT_NAN", "3,1")
    loss = torch.tensor(2.0)
    assert faults.inject("nan_loss", "3,0", loss) is loss and faults.inject("nan_loss", "2,1", loss) is loss
    assert math.isnan(faults.inject("nan_loss", "3,1", loss).item())


def test_a_full_disk_fails_torch_save_after_4_kib(monkeypatch):
    monkeypatch.setenv("POSBENCH_ENOSPC_DURING_SAVE", "2")
    small, big = io.BytesIO(), io.BytesIO()
    torch.save(torch.zeros(10), faults.inject("full_disk", "2", small))  # under 4 KiB: written
    assert torch.equal(torch.load(io.BytesIO(small.getvalue())), torch.zeros(10))
    with pytest.raises(RuntimeError) as e:
        torch.save(torch.zeros(10_000), faults.inject("full_disk", "2", big))
    chain = [e.value, e.value.__cause__, e.value.__context__]
    assert any(isinstance(x, OSError) and x.errno == errno.ENOSPC for x in chain) or \
        "No space left on device" in str(e.value)


def test_a_crash_during_save_leaves_the_previous_checkpoint_intact(tmp_path):
    """A real save killed after model.pt: exit 17, the step's half-written temp dir left, `latest` still the
    previous step; the next start removes the temp dir."""
    script = (f"import torch\nfrom pathlib import Path\nfrom posbench.training import checkpoint as ckpt\n"
              f"run = Path({str(tmp_path)!r})\nstate = {{'w': torch.ones(3)}}\n"
              "for step in (1, 2):\n"
              "    ckpt.save(run, step, state, {}, {'step': step, 'tokens': step}, 'seed: 1\\n')\n")
    env = {**os.environ, "POSBENCH_CRASH_DURING_SAVE": "2", "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 17, proc.stderr
    tmp = tmp_path / ".tmp_step_00000002"
    assert (tmp / "model.pt").is_file() and not (tmp / "optim.pt").exists()
    assert os.readlink(tmp_path / "latest") == "step_00000001" and not (tmp_path / "step_00000002").exists()
    from posbench.training import checkpoint as ckpt

    assert ckpt.cleanup_partial(tmp_path) == [tmp] and not tmp.exists()
