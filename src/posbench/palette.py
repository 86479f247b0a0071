"""One colour per PE (or arm) name, the same in every chart: the study PNGs, the sweep PNGs, eval.py's PNGs and
the app's plotly charts; and one colour scale for every accuracy heatmap. Imports nothing: the plots of every
layer may use it.

A registered PE has a fixed colour, grouped by family: rotary PEs in greens and teals, bias PEs in reds, pinks
and purples, absolute PEs in blues and oranges/browns, `none` grey. The quickstart's five keep their hues (blue
sinusoidal, orange learned, green rope, red alibi, grey none) in the Okabe-Ito shades, which stay apart for
colour-blind readers (matplotlib's red and green do not). The others were picked from a grid in CIE LCh, each in
its family's hue band, to maximise the smallest distance to every other colour in normal vision and under
simulated deuteranopia and protanopia (Machado et al. 2009), and to white: every two registered PEs are at least
20 CIE76 delta-E apart (8 under either simulation), and every colour at least 30 from the white page
(tests/app/test_palette.py computes it). Any other name (an arm's label, a checkpoint label) takes one from a
second list by a stable hash of the name, so it has the same colour on every page whatever else is drawn beside
it. Seeds of one PE share its colour and differ by line dash (`seed_dash`).
"""

from __future__ import annotations

import zlib

PE_COLOURS = {
    # no position information
    "none": "#7f7f7f",
    # absolute: added to the token embeddings
    "sinusoidal": "#0072b2", "learned": "#e69f00", "abacus": "#396bfd", "binary": "#812803",
    "binary_norm": "#41d7fd", "decimal": "#eebca2", "decimal_norm": "#6f8ced", "integer": "#9a6d55",
    "sininit": "#67b1f3", "sinonly": "#74739e",
    # bias: on the attention logits
    "alibi": "#d55e00", "fire": "#d995d0", "fox": "#ca2fc1", "kerple_log": "#5f3a5a", "kerple_power": "#8f082f",
    "relative_learned": "#6e2ab9", "t5": "#f18f9e",
    # rotary
    "rope": "#009e73", "drope": "#205c49", "fope": "#75df44", "hope": "#17a743", "lrope": "#4c9ca6",
    "modded_rope": "#5c722e", "pope": "#5cdac5", "prope": "#83b979", "xpos": "#a29127",
    # context, hybrids, wrappers
    "cope": "#782072", "hybrid": "#3e3b92", "rnope_swa": "#c63429", "coupled": "#d1c97c", "randomized": "#eb8156",
}
# for names that are not registered PEs; none of these is in PE_COLOURS
OTHER_COLOURS = ("#000000", "#a55194", "#6b6ecf", "#b5cf6b", "#e7ba52", "#ad494a", "#de9ed6", "#3a7d44",
                 "#fd8d3c", "#6baed6")
# every accuracy heatmap (app and PNGs): one perceptually uniform, colour-blind-safe scale, in percent 0-100
HEATMAP_SCALE = "viridis"
HEATMAP_RANGE = (0.0, 100.0)
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
