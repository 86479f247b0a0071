"""`--emit torchrun | slurm`: write what launches the sweep on a cluster, instead of training here.

Every run's resolved config is written as YAML (`<out>/configs/<run>.yaml`, loaded by train.py's strict
loader, `train.resume: auto` inside), so a launch is `train.py <out>/configs/<run>.yaml`. Branch runs follow
their main run in the same job, since they start from its branch checkpoint. A finished run leaves
`<out>/done/<run>.json`; the scripts skip those, so re-submitting continues an interrupted sweep (killed runs
resume from their checkpoints). Afterwards `scripts/sweep.py CONFIG --out DIR --report-only` evaluates the
final checkpoints and writes the report. `<out>` must be on storage every node sees.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from posbench.fileio import atomic_open
from posbench.sweeps.sweep_spec import Run, SweepConfig


def write_configs(runs: list[Run], out_dir: Path) -> dict[str, Path]:
    paths = {}
    for run in runs:
        path = out_dir / "configs" / f"{run.name}.yaml"
        with atomic_open(path, "w") as f:
            f.write(run.cfg.to_yaml())
        paths[run.name] = path
    return paths


def chains(runs: list[Run]) -> list[list[Run]]:
    """One chain per main run: the run, then its branch runs."""
    out: list[list[Run]] = []
    for run in runs:
        if run.parent:
            out[-1].append(run)
        else:
            out.append([run])
    return out


def _write_script(path: Path, text: str) -> Path:
    with atomic_open(path, "w") as f:
        f.write(text)
    path.chmod(0o755)
    return path


def emit_torchrun(sweep: SweepConfig, runs: list[Run], out_dir: Path) -> Path:
    configs = write_configs(runs, out_dir)
    q = shlex.quote
    lines = ["#!/usr/bin/env bash",
             f"# Sweep `{sweep.name}`: {len(runs)} runs one after another on this node, each on all of its GPUs.",
             "# Run from the repository root. NPROC (processes per run, default: every visible GPU) and",
             "# MAX_RESTARTS (default 3) may be set. Finished runs are skipped; killed ones resume.",
             "set -euo pipefail",
             'NPROC="${NPROC:-$(nvidia-smi -L 2>/dev/null | wc -l)}"',
             'NPROC="${NPROC/#0/1}"',
             f"OUT={q(str(out_dir))}",
             'mkdir -p "$OUT/done"']
    for run in runs:
        lines.append(f'[ -f "$OUT/done/{run.name}.json" ] || {{ torchrun --standalone --nproc_per_node="$NPROC" '
                     f'--max-restarts="${{MAX_RESTARTS:-3}}" train.py {q(str(configs[run.name]))} && '
                     f"echo '{{\"launcher\": \"torchrun\"}}' > \"$OUT/done/{run.name}.json\"; }}")
    lines.append(f"echo 'all runs done; report: python scripts/sweep.py SWEEP.yaml --out {q(str(out_dir))} "
                 "--report-only'")
    return _write_script(out_dir / "launch_torchrun.sh", "\n".join(lines) + "\n")


def emit_slurm(sweep: SweepConfig, runs: list[Run], out_dir: Path) -> Path:
    configs = write_configs(runs, out_dir)
    groups = chains(runs)
    q = shlex.quote
    array = "\n".join(f'  "{" ".join(str(configs[r.name]) for r in chain)}"' for chain in groups)
    text = f"""#!/usr/bin/env bash
# Sweep `{sweep.name}`: one array task per main run ({len(groups)}), its branch runs after it in the same task.
# Submit from the repository root:   sbatch {out_dir / 'sweep.sbatch'}
# Multi-node runs: sbatch --nodes=N ...; each node starts one torchrun launcher (srun), which meet through the
# c10d rendezvous on the first node. Set GPUS_PER_NODE (default: SLURM_GPUS_ON_NODE), RDZV_PORT, MAX_RESTARTS.
# Checkpoints and done markers live under OUT, which must be on shared storage.
#SBATCH --job-name=posbench-{sweep.name}
#SBATCH --array=0-{len(groups) - 1}
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=48:00:00
#SBATCH --output={out_dir / 'logs' / '%x_%A_%a.out'}
set -euo pipefail
OUT={q(str(out_dir))}
CHAINS=(
{array}
)
read -ra CONFIGS <<< "${{CHAINS[$SLURM_ARRAY_TASK_ID]}}"
HEAD="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"
PORT="${{RDZV_PORT:-$((29500 + SLURM_ARRAY_TASK_ID % 1000))}}"
mkdir -p "$OUT/done"
for cfg in "${{CONFIGS[@]}}"; do
  name="$(basename "$cfg" .yaml)"
  [ -f "$OUT/done/$name.json" ] && continue
  srun --ntasks-per-node=1 torchrun --nnodes="$SLURM_NNODES" \\
    --nproc_per_node="${{GPUS_PER_NODE:-$SLURM_GPUS_ON_NODE}}" \\
    --rdzv-id="$SLURM_ARRAY_JOB_ID-$SLURM_ARRAY_TASK_ID-$name" --rdzv-backend=c10d --rdzv-endpoint="$HEAD:$PORT" \\
    --max-restarts="${{MAX_RESTARTS:-3}}" train.py "$cfg"
  echo '{{"launcher": "slurm"}}' > "$OUT/done/$name.json"
done
"""
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    return _write_script(out_dir / "sweep.sbatch", text)


EMITTERS = {"torchrun": emit_torchrun, "slurm": emit_slurm}
