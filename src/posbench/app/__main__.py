"""Shim: `python -m posbench.app` = `posbench app` (posbench/cli/app.py)."""

if __name__ == "__main__":
    import sys

    from posbench.cli.app import main

    sys.exit(main())
