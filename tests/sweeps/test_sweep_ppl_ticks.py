"""The sweep's perplexity-vs-length figure: tick labels that do not overlap."""

import matplotlib.pyplot as plt
import pytest

from posbench.sweeps.sweep_plots import ppl_axes


def test_perplexity_axis_tick_labels_do_not_overlap():
    """Item 4: a log perplexity axis spanning less than a decade labelled every minor tick in
    scientific form (`4.25x10^0`, `4.3x10^0`, ...), crowded together. The labels inside the panel must be plain
    numbers, few, and each clear of the next."""
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot([32, 64, 128, 256], [4.3, 4.4, 4.5, 4.57])
    ppl_axes(ax, "nano", 64)
    fig.tight_layout()
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    shown = [t for t in ax.get_yticklabels(which="both") if t.get_visible() and t.get_text()
             and lo <= t.get_position()[1] <= hi]
    assert 2 <= len(shown) <= 8
    for t in shown:
        assert "times" not in t.get_text() and float(t.get_text().strip("$").replace("\\mathdefault{", "")
                                                     .rstrip("}")) == pytest.approx(t.get_position()[1], rel=0.02)
    boxes = sorted((t.get_window_extent() for t in shown), key=lambda b: b.y0)
    assert all(a.y1 <= b.y0 for a, b in zip(boxes, boxes[1:]))
    plt.close(fig)
