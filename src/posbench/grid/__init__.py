"""The grid that studies and sweeps share: rows (arms) x seeds x cells.

    arm.py       Arm: one labelled row (a PE, an architecture, run settings of its own), one grammar for both
    cells.py     the cell kinds (a task-training cell, a pretraining run) behind one interface, and the order a
                 runner takes them in (seed-major, finished cells skipped, the estimate before the first)
    estimate.py  the one wall-time estimator of a grid's cells on this machine (each kind prices its own cells)

studies/ (task-training cells) and sweeps/ (pretraining runs) expand their specs into these cells and run
them through `cells.pending`; what trains a cell stays in its room (studies/study_runner.run_round,
sweeps/execute.run_all).
"""
