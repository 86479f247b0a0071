"""One colour per PE (or arm) name, the same in every chart: the study PNGs, the sweep PNGs and the app's
plotly charts. Imports nothing: the plots of every layer may use it.

A registered PE has a fixed colour (the quickstart's five keep matplotlib's first four and a grey for
`none`); any other name (an arm's label, a checkpoint label) takes one from a second list by a stable hash
of the name, so it has the same colour on every page whatever else is drawn beside it. Seeds of one PE
share its colour and differ by line dash (`seed_dash`).
"""

from __future__ import annotations

import zlib

PE_COLOURS = {
    "sinusoidal": "#1f77b4", "learned": "#ff7f0e", "rope": "#2ca02c", "alibi": "#d62728", "none": "#7f7f7f",
    "t5": "#9467bd", "fire": "#8c564b", "kerple_log": "#e377c2", "kerple_power": "#bcbd22", "xpos": "#17becf",
    "relative_learned": "#393b79", "randomized": "#637939", "integer": "#8c6d31", "lrope": "#843c39",
    "prope": "#7b4173", "hybrid": "#3182bd", "sininit": "#e6550d", "sinonly": "#31a354", "binary": "#756bb1",
    "binary_norm": "#636363", "decimal": "#9c9ede", "decimal_norm": "#cedb9c",
    "abacus": "#e6ab02", "coupled": "#1b9e77",
    # the 2024-2026 zoo: each its own hue, away from the quickstart's five
    "modded_rope": "#74c476", "hope": "#006d2c", "fope": "#c7e9c0", "pope": "#08519c", "cope": "#f768a1",
    "fox": "#7a0177", "rnope_swa": "#fdae6b", "drope": "#a63603",
}
# for names that are not registered PEs; none of these is in PE_COLOURS
OTHER_COLOURS = ("#000000", "#a55194", "#6b6ecf", "#b5cf6b", "#e7ba52", "#ad494a", "#de9ed6", "#3a7d44",
                 "#fd8d3c", "#6baed6")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")  # plotly names
MPL_DASHES = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-.", "longdash": (0, (8, 3)),
              "longdashdot": (0, (8, 3, 1, 3))}


def pe_colour(name: str) -> str:
    """`#rrggbb` for a PE or row label: fixed for registered PEs, a stable pick for any other name."""
    name = str(name)
    if name in PE_COLOURS:
        return PE_COLOURS[name]
    return OTHER_COLOURS[zlib.crc32(name.encode()) % len(OTHER_COLOURS)]


def seed_dash(index: int) -> str:
    """Plotly dash style of the `index`-th seed (or run) of one PE: its colour stays the PE's."""
    return DASHES[index % len(DASHES)]
