"""Training: loop, checkpoints, distributed helpers, run directories."""
