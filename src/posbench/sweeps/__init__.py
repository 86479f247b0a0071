"""Sweeps: model sizes x PEs x seeds (x any config field) pretrained through the project's own trainer,
every final checkpoint evaluated, one comparison report.

    sweep_spec.py            SweepConfig (strict YAML, presets in configs/sweep/) and the planned runs, typed
                             RunConfigs
    execute.py               the trainings, one after another or `workers` at a time, resumable (done markers;
                             killed runs resume from their checkpoints)
    evaluate.py              eval.py's suites on every final checkpoint, cached per checkpoint
    sweep_sequential.py      sequential seeds: the study's looks over evaluated runs, only undecided rows get more
    sweep_report.py          report.md, results.csv, throughput.md: means and t-intervals over seeds, per PE;
                             its long-context section is a study's (studies/long_context_report.py)
    sweep_plots.py           loss vs tokens, perplexity vs length, task accuracy, passkey/NIAH heatmaps, per PE
    emit.py                  --emit torchrun | slurm: the launch commands / an sbatch array script instead of running
    sweep_runner.py          run_sweep: all of the above for one sweep config
    wandb_sweep.py           WandB's own sweeps over train.py: a sweep file checked, a trial's command rendered

Entry point: `posbench sweep` = scripts/sweep.py (posbench/cli/sweep.py).
"""
