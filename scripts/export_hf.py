#!/usr/bin/env python
"""Export a checkpoint as a Hugging Face transformers model directory: `posbench export` (posbench/cli/export.py
has the usage; `python scripts/export_hf.py --help` prints it)."""

from posbench.cli.export import main

if __name__ == "__main__":
    raise SystemExit(main())
