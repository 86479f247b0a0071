"""`python -m posbench COMMAND ...` = the `posbench` console script (posbench/cli/main.py).

    python -m posbench train --model-size nano --pe-type rope train.steps=10
    python -m posbench eval runs/nano_rope/latest --suite ppl
    python -m posbench data info configs/data/local_example.yaml
"""

if __name__ == "__main__":
    from posbench.cli.main import main

    raise SystemExit(main(prog="python -m posbench"))
