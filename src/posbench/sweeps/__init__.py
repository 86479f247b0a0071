"""Sweeps: model sizes x PEs x seeds (x any config field) pretrained through the project's own trainer,
every final checkpoint evaluated, one comparison report.

    sweep_spec.py    SweepConfig (strict YAML, presets in configs/sweep/) and the planned runs, typed RunConfigs
    execute.py       runs one after another, resumable (done markers; killed runs resume from their checkpoints)
    evaluate.py      eval.py's suites on every final checkpoint, cached per checkpoint
    sweep_report.py  report.md, results.csv, throughput.md: means and t-intervals over seeds, per PE
    sweep_plots.py   loss vs tokens, perplexity vs length, task accuracy, passkey/NIAH heatmaps, side by side per PE
    emit.py          --emit torchrun | slurm: the launch commands / an sbatch array script instead of running
    sweep_runner.py  run_sweep: all of the above for one sweep config

Entry point: `posbench sweep` = scripts/sweep.py (posbench/cli/sweep.py).
"""
