"""One colour per PE (or arm) name, the same in every chart: the study PNGs, the sweep PNGs, eval.py's PNGs and
the app's plotly charts; and one colour scale for every accuracy heatmap. Imports nothing: the plots of every
layer may use it.

The PEs in PE_COLOURS have fixed colours, grouped by family: rotary PEs in greens and teals, bias PEs in reds, pinks
and purples, absolute PEs in blues and oranges/browns, `none` grey. The quickstart's five keep their hues (blue
sinusoidal, orange learned, green rope, red alibi, grey none) in the Okabe-Ito shades, which stay apart for
colour-blind readers (matplotlib's red and green do not). The others were picked from a grid in CIE LCh, each in
its family's hue band, to maximise the smallest distance to every other colour in normal vision and under
simulated deuteranopia and protanopia (Machado et al. 2009), and to white: every two of them are at least
20 CIE76 delta-E apart (8 under either simulation), and every colour at least 30 from the white page
(tests/app/test_palette.py computes it). Any other name, a PE added since (one file in pe/, no edit here) as much
as an arm's or a checkpoint's label, gets its colour by rule: OTHER_COLOURS[crc32(name) % len(OTHER_COLOURS)], a
stable hash of the name alone, so it has the same colour on every page whatever else is drawn beside it. Those
slots are as far from every fixed colour, from each other and from white as the fixed colours are from each other
(20, 8 under either simulation, 30). Two added PEs may share a slot (one chance in 17 per pair): the palette test,
run over every registered PE, then fails, and one of them gets a fixed colour above. Seeds of one PE share its
colour and differ by line dash (`seed_dash`).
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
    # stick_breaking's slot by rule was cable's: a fixed colour from the same LCh search, far from every slot too
    "stick_breaking": "#ab39f9",
    # repo's slot by rule was cable's too: the colour farthest from every other on an RGB grid of step 8
    "repo": "#0000f8",
    # grape_m's slot by rule is cable's too: the green-dominant colour of a 17-step RGB grid farthest from every
    # fixed colour and slot (31 delta-E; 8+ under either simulation; 30+ from white)
    "grape_m": "#ccff00",
    # seqpe's slot by rule was selective_rope's: the 17-step RGB grid's colour (not near black) farthest from every
    # other, in normal vision and under either simulation, and far enough from white
    "seqpe": "#ddff88",
}
# for every name without a fixed colour (the rule above): picked greedily from a CIE LCh grid (lightness 25..85,
# chroma 15..95, hue 0..355, steps of 5, in that order), each colour kept when it is at least 20 delta-E from every
# fixed colour and every colour kept before it (8 under simulated deuteranopia and protanopia) and 30 from white
OTHER_COLOURS = ("#4b3727", "#173d61", "#622c13", "#711248", "#7f3e47", "#113dda", "#3c646e", "#895119", "#985387",
                 "#e05263", "#e66493", "#bf73d5", "#eeab62", "#fece60", "#81eb91", "#38efb5", "#e3d929")
# every accuracy heatmap (app and PNGs): one perceptually uniform, colour-blind-safe scale, in percent 0-100
HEATMAP_SCALE = "viridis"
HEATMAP_RANGE = (0.0, 100.0)
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")  # plotly names
MPL_DASHES = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-.", "longdash": (0, (8, 3)),
              "longdashdot": (0, (8, 3, 1, 3))}


def pe_colour(name: str) -> str:
    """`#rrggbb` for a PE or row label: fixed for the PEs that have one, by rule for any other name."""
    name = str(name)
    if name in PE_COLOURS:
        return PE_COLOURS[name]
    return OTHER_COLOURS[zlib.crc32(name.encode()) % len(OTHER_COLOURS)]


def seed_dash(index: int) -> str:
    """Plotly dash style of the `index`-th seed (or run) of one PE: its colour stays the PE's."""
    return DASHES[index % len(DASHES)]
