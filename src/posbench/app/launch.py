"""What `python -m posbench.app` hands to `streamlit run`: the runs directory checked, and the app's own
Streamlit settings as defaults the user's flags override.

Defaults: `client.toolbarMode=minimal` (no Deploy button or developer menu: this is a lab tool, not an app
to publish) and `browser.gatherUsageStats=false` (Streamlit sends no usage statistics unless asked to).
"""

from __future__ import annotations

from pathlib import Path

from posbench.errors import ConfigError

STREAMLIT_DEFAULTS = {"client.toolbarMode": "minimal", "browser.gatherUsageStats": "false"}


def runs_dir(path: str | Path) -> Path:
    """The runs directory, absolute; ConfigError (one line) when it, or a parent of it, is something other
    than a directory: the app would fail later, at the first study it starts."""
    p = Path(path).expanduser().resolve()
    for part in (p, *p.parents):
        if part.exists() and not part.is_dir():
            what = "a regular file" if part.is_file() else "not a directory"
            if part == p:
                raise ConfigError(f"--runs {path}: {p} is {what}; give a directory (it is created if missing)")
            raise ConfigError(f"--runs {path}: {part} is {what}, so {p} cannot be a directory")
    return p


def streamlit_args(script: Path, extra: list[str]) -> list[str]:
    """argv for `streamlit run script`: the app's defaults first, as flags, unless `extra` sets them."""
    given = {a[2:].split("=", 1)[0] for a in extra if a.startswith("--")}
    defaults = [f"--{k}={v}" for k, v in STREAMLIT_DEFAULTS.items() if k not in given]
    return ["streamlit", "run", str(script), *defaults, *extra]
