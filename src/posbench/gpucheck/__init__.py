"""The GPU path checked in one prepared call (scripts/gpu_check.py): a GPU is lent rarely and briefly, so each
mode runs everything it measures under one time budget, isolates every row (one failure is a row of the table,
not the end of the call), writes JSON as it goes and prints its tables last. `--dry-run` runs the same code on
the CPU at toy sizes, so the script is tested while no GPU is available.

    common.py    the budget, isolated rows, tables, JSON under $OUT, the environment and the matmul peak
    kernels.py   GPU-only tests, kernel correctness against an fp32 eager reference, loop throughput and memory
    pretrain.py  the PEs pretrained on the carried corpus and evaluated past the training length
"""
