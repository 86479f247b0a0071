"""Run train.py on every GPU of this machine: directly on one GPU (or CPU), under torchrun on several.
The `program` of the WandB sweeps (configs/wandb_sweeps/); usable alone with train.py's arguments:

    python scripts/launch.py --model-size tiny --pe-type rope optim.lr=6e-4
    POSBENCH_NPROC=2 python scripts/launch.py ...       # force the process count
    python scripts/launch.py --print-command ...        # show the command, run nothing
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from posbench.sweeps.wandb_sweep import gpu_count, launch_command  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry = "--print-command" in argv
    argv = [a for a in argv if a != "--print-command"]
    command = launch_command(argv, gpu_count(), dict(os.environ))
    print(" ".join(command), flush=True)
    return 0 if dry else subprocess.run(command).returncode


if __name__ == "__main__":
    raise SystemExit(main())
