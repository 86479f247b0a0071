"""Render published results' pages from their data: `results/<name>/` -> `docs/results/<name>.md`, its figure and
`docs/results/index.md`.

    posbench results render               # every result under results/
    posbench results render quickstart    # one (the index is rewritten from all of them)

A study run writes the data form in `<out>/result/`; copy that folder to `results/<name>/` to publish it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from posbench.cli.errors_cli import cli_entry
from posbench.errors import ConfigError


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    r = sub.add_parser("render", help="write docs/results/<name>.md (and its figure) from results/<name>/")
    r.add_argument("names", nargs="*", help="result folders under --results (default: all of them)")
    r.add_argument("--results", default="results", help="where the result folders are (default results/)")
    r.add_argument("--docs", default="docs/results", help="where the pages go (default docs/results/)")
    r.add_argument("--no-figures", action="store_true", help="the pages' text only")
    args = p.parse_args(argv)
    from posbench.fileio import write_text
    from posbench.studies.published import index, published, render

    root, docs = Path(args.results), Path(args.docs)
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder of results (run from the repository root, or give --results)")
    unknown = [n for n in args.names if not (root / n).is_dir()]
    if unknown:
        raise ConfigError(f"no result folder {', '.join(unknown)} under {root} (there: "
                          f"{', '.join(sorted(q.name for q in root.iterdir() if q.is_dir())) or 'none'})")
    every = published(root)  # all are read (and checked) before any page is written
    chosen = [x for x in every if not args.names or x.name in args.names]
    pages = {}
    for result in chosen:
        pages.update(render(result, docs, figures=not args.no_figures))
    pages[docs / "index.md"] = index(every)
    for path, text in pages.items():
        write_text(path, text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
