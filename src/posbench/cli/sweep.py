"""Pretrain every (size x PE x seed [x any config field]) of a sweep, evaluate the final checkpoints, and
write one comparison (report.md, results.csv, plots).

    python scripts/sweep.py cpu_demo                            # a preset from configs/sweep/, runs here
    python scripts/sweep.py cpu_demo --prepare-data             # tokenize its corpus with its task mix first
    python scripts/sweep.py cpu_demo --workers 2                # two runs at a time, one core each
    python scripts/sweep.py cpu_demo --estimate                 # its wall time on this machine, nothing run
    python scripts/sweep.py alibi_ppl --sequential-seeds 3:10:1   # 3 seeds, one more per row a claim leaves open
    python scripts/sweep.py configs/sweep/reference.yaml --emit slurm     # an sbatch array script instead
    python scripts/sweep.py reference --emit slurm --out /shared/sweeps/ref
    python scripts/sweep.py reference --out /shared/sweeps/ref --report-only   # after the cluster jobs

Re-running the same command skips finished runs and evaluations and resumes a killed run.
Errors are one line `error: ...` with the shared exit codes (2 bad input, 4 checkpoint, 5 disk full).
`posbench sweep ...` is the same command; the work is posbench/sweeps/sweep_runner.py's.
"""

from __future__ import annotations

import argparse
import dataclasses
import textwrap

from posbench.cli.arg_types import positive_int
from posbench.cli.errors_cli import cli_entry
from posbench.presets import preset_names


@cli_entry
def main(argv=None) -> int:
    intro, examples = __doc__.split("\n\n", 1)
    p = argparse.ArgumentParser(description=textwrap.fill(" ".join(intro.split()), 79), epilog=examples,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help=f"preset name ({', '.join(preset_names('sweep'))}) or a sweep YAML file")
    p.add_argument("--out", help="output directory (default runs/sweep_<name>)")
    p.add_argument("--emit", choices=["torchrun", "slurm"], help="write launch scripts instead of training here")
    p.add_argument("--report-only", action="store_true", help="no training: evaluate finished runs and report")
    p.add_argument("--estimate", action="store_true",
                   help="plan and check every run, print the wall-time estimate of those still to train into --out "
                        "on this machine and exit: nothing is trained or written")
    p.add_argument("--workers", type=positive_int,
                   help="train (then evaluate) this many runs at once, each in its own process with "
                        "cores/workers threads (default: the sweep's `workers`, 1 unless set)")
    p.add_argument("--prepare-data", action="store_true",
                   help="first tokenize the runs' local or downloaded corpus with their tokenizer and task mix "
                        "(resumable) and print the measured shares")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (logs, CI)")
    p.add_argument("--sequential-seeds", metavar="START:MAX[:STEP]",
                   help="sequential seeds (docs/guide.md): every row (a PE or arm at a size) gets START seeds, then "
                        "STEP more (default 1) while a claim it takes part in is undecided, up to MAX, each look "
                        "judged at a group-sequential boundary; e.g. 3:10:1")
    args = p.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        p.error(f"--workers {args.workers}: must be at least 1")
    if args.estimate and (args.emit or args.report_only):
        p.error("--estimate only looks: give it without --emit and --report-only")

    from posbench.studies.sequential import parse_sequential
    from posbench.sweeps.sweep_runner import estimate_text, run_sweep
    from posbench.sweeps.sweep_spec import load_sweep

    sweep = load_sweep(args.sweep)  # the whole spec, its `eval` included, checked before anything else
    if args.sequential_seeds:  # checked as the spec's form is (a sweep without claims is refused): before any work
        sweep = dataclasses.replace(sweep, seeds=parse_sequential(args.sequential_seeds), sequential=None)
    if args.estimate:
        print(f"estimate: {estimate_text(sweep, args.out, args.workers)}")
        return 0
    run_sweep(sweep, args.out, emit_kind=args.emit, report_only=args.report_only,
              prepare_data=args.prepare_data, workers=args.workers, progress=not args.no_progress)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
