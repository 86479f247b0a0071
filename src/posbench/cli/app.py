"""`posbench app [--runs DIR] [streamlit options]` (= `posbench-app`, `python -m posbench.app`): start the app
with `streamlit run`.

Extra arguments go to Streamlit (`--server.port 8601 --server.headless true`); the app's own defaults
(no Deploy button, no usage statistics: `app/launch.py`) come before them. `--runs` sets where the app
keeps the studies it starts (default `runs/app`; a regular file there is refused); the page reads it from
POSBENCH_APP_RUNS.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import posbench.app
from posbench.app import launch
from posbench.app.app_paths import RUNS_ENV
from posbench.cli.errors_cli import cli_entry


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run and explore positional-encoding studies in the browser.")
    p.add_argument("--runs", default=os.environ.get(RUNS_ENV, "runs/app"),
                   help="directory for the studies the app starts (default runs/app)")
    args, streamlit_args = p.parse_known_args(argv)
    os.environ[RUNS_ENV] = str(launch.runs_dir(args.runs))  # a regular file: a one-line error
    from streamlit.web import cli as st_cli  # imported here: `--help` stays fast

    page = Path(posbench.app.__file__).with_name("main.py")  # the Streamlit script: page choice
    sys.argv = launch.streamlit_args(page, streamlit_args)
    return st_cli.main()


if __name__ == "__main__":
    sys.exit(main())
