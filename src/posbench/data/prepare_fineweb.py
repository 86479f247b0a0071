"""Shim: `python -m posbench.data.prepare_fineweb` = `posbench data` (posbench/cli/data.py)."""

if __name__ == "__main__":
    from posbench.cli.data import main

    raise SystemExit(main())
