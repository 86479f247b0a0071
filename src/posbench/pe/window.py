"""The bound on a sliding window, one rule for model.attention_window and RNoPE-SWA's pe.window.

A window larger than the training length is meaningful (it binds at longer evaluation lengths: RNoPE-SWA's 4096
over a shorter training window), so the bound is the longest sequence any model here can run: positions are
float32, exact integers only up to 2**24 (evaluation/lengths.py refuses longer evaluation lengths for the same
reason). A window past that is full attention at every length while the run is named and counted as windowed
(`_win4611686018427387904`): refused, with null (full attention) as the fix."""

from __future__ import annotations

from posbench.errors import ConfigError

MAX_WINDOW = 1 << 24


def check_window(window: int | None, setting: str) -> None:
    """ConfigError naming `setting` unless `window` is None (full attention) or 1 .. MAX_WINDOW keys."""
    if window is None:
        return
    if window < 1:
        raise ConfigError(f"{setting} must be >= 1 (keys a query sees, its own included) or null for full attention, "
                          f"got {window}")
    if window > MAX_WINDOW:
        raise ConfigError(f"{setting}={window} is longer than any sequence a model here can run (2**24 = "
                          f"{MAX_WINDOW:,} tokens: float32 positions), so it would be full attention at every length "
                          "under a windowed name; give null for full attention, or a window up to 2**24")
