"""Study plots (matplotlib, Agg): learning curves with CI bands, ID vs OOD bars with CIs, accuracy vs
sequence length, exact match against digit count (arithmetic tasks), attention maps. Each function writes
one PNG and returns its file name.

Every accuracy drawn says which one it is (DESIGN 20): *OOD beyond train length* (only the target positions
past the training length: extrapolation, the headline metric) leads, and the OOD accuracy over all positions
of the longer examples, which also counts the positions the model was trained at, is always labelled
*OOD, all positions*; "OOD" alone labels nothing. A value that is n/a is written "n/a", never drawn as 0.
Colours: one per PE (posbench.palette), the same in every figure and in the app."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from posbench.fileio import atomic_open  # noqa: E402
from posbench.palette import pe_colour  # noqa: E402
from posbench.stats import interval  # noqa: E402
from posbench.studies.cell_result import CellResult  # noqa: E402

ACC = (0.0, 1.0)  # every plotted figure is an accuracy: intervals clipped to it
from posbench.studies.digits_report import digit_groups, trained_digits  # noqa: E402
from posbench.studies.long_context_plots import long_context_plots  # noqa: E402

# (result key, label): the order every figure draws them in; the labels are the report table's
BEYOND = ("ood_beyond_acc", "OOD beyond train length")
ALL_POSITIONS = ("ood_acc", "OOD, all positions")
ID = ("id_acc", "ID")
CURVE_METRICS = (BEYOND, ID, ALL_POSITIONS)


def _by_task_pe(results: list[CellResult]) -> dict[tuple[str, str], list[CellResult]]:
    out = defaultdict(list)
    for r in results:
        out[(r.task, r.pe)].append(r)
    return out


def _tasks_pes(results):
    tasks = list(dict.fromkeys(r.task for r in results))
    pes = list(dict.fromkeys(r.pe for r in results))
    return tasks, pes


def learning_curves(results, out_dir: Path, confidence: float) -> str:
    """Per task, one panel per accuracy (beyond train length, ID, OOD all positions) at every scored
    checkpoint: mean over seeds with a CI band. Cells written before the curve recorded the beyond-length
    accuracy leave that panel n/a."""
    tasks, pes = _tasks_pes(results)
    fig, axes = plt.subplots(len(tasks), len(CURVE_METRICS), figsize=(14, 2.9 * len(tasks)), squeeze=False)
    groups = _by_task_pe(results)
    for i, task in enumerate(tasks):
        first = next(c for c in results if c.task == task)
        for j, (key, label) in enumerate(CURVE_METRICS):
            ax = axes[i][j]
            drawn = False
            for pe in pes:
                cells = groups.get((task, pe), [])
                if not cells:
                    continue
                steps = [point.step for point in cells[0].curve]
                stats = [interval([getattr(c.curve[k], key) for c in cells if k < len(c.curve)],
                                  confidence, n_boot=2000, bounds=ACC) for k in range(len(steps))]
                if any(s.mean is None for s in stats):
                    continue
                ax.plot(steps, [100 * s.mean for s in stats], marker="o", ms=3, color=pe_colour(pe), label=pe)
                ax.fill_between(steps, [100 * s.band()[0] for s in stats], [100 * s.band()[1] for s in stats],
                                color=pe_colour(pe), alpha=0.2)
                drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "n/a: not recorded per checkpoint\nin these results", ha="center", va="center",
                        transform=ax.transAxes, fontsize=9, color="grey")
            _accuracy_axes(ax, f"{task}: {label}", "step", first.chance)
    fig.legend(handles=[Line2D([], [], color=pe_colour(pe), marker="o", ms=3, label=pe) for pe in pes],
               loc="upper center", ncol=min(8, len(pes)), fontsize=8, frameon=False)
    fig.suptitle("Accuracy per target position during training (mean over seeds, CI band; dotted: chance)",
                 fontsize=10, y=0.0, va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1 - 0.25 / (2.9 * len(tasks))))
    return _save(fig, out_dir, "learning_curves.png", layout=False)


def _accuracy_axes(ax, title: str, xlabel: str, chance: float) -> None:
    """Accuracy in % on 0..102 with the chance level dotted."""
    ax.axhline(100 * chance, color="grey", ls=":", lw=1)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy %")
    ax.set_ylim(0, 102)


# how each accuracy's bar is filled: ID light, beyond train length solid (the headline), all positions hatched
BAR_STYLE = {"id_acc": dict(alpha=0.35), "ood_beyond_acc": dict(),
             "ood_acc": dict(hatch="///", fill=False)}


def id_ood_bars(results, out_dir: Path, confidence: float) -> str:
    """Per task and PE: ID accuracy, OOD accuracy beyond the training length and OOD accuracy over all
    positions, mean over seeds with CI whiskers; the PE's colour, the accuracy's fill (legend)."""
    tasks, pes = _tasks_pes(results)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.4 * len(tasks), 3.9), squeeze=False)
    groups = _by_task_pe(results)
    bars = (ID, BEYOND, ALL_POSITIONS)
    width = 0.27
    for i, task in enumerate(tasks):
        ax = axes[0][i]
        for k, (key, _label) in enumerate(bars):
            for x, pe in enumerate(pes):
                s = interval([c.metric(key) for c in groups.get((task, pe), [])], confidence, n_boot=2000,
                             bounds=ACC)
                pos = x + (k - 1) * width
                if s.mean is None:
                    ax.text(pos, 2, "n/a", ha="center", va="bottom", rotation=90, fontsize=7, color="grey")
                    continue
                err = [[100 * (s.mean - s.band()[0])], [100 * (s.band()[1] - s.mean)]]
                ax.bar(pos, 100 * s.mean, width, yerr=err, capsize=2, color=pe_colour(pe), edgecolor=pe_colour(pe),
                       **BAR_STYLE[key])
        ax.axhline(100 * next(c for c in results if c.task == task).chance, color="grey", ls=":", lw=1)
        ax.set_xticks(np.arange(len(pes)), pes, rotation=30, fontsize=8)
        ax.set_title(task)
        ax.set_ylim(0, 105)
    axes[0][0].set_ylabel("accuracy % (mean over seeds, CI)")
    handles = [Patch(facecolor="dimgrey", edgecolor="dimgrey", label=label, **BAR_STYLE[key]) for key, label in bars]
    fig.legend(handles=handles, loc="upper center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("Accuracy per target position; bar colour: the PE; dotted: chance", fontsize=9, y=0.02,
                 va="bottom")
    fig.tight_layout(rect=(0, 0.05, 1, 0.94))
    return _save(fig, out_dir, "id_ood_bars.png", layout=False)


def accuracy_vs_length(results, out_dir: Path, confidence: float) -> str:
    return _save(accuracy_vs_length_figure(results, confidence), out_dir, "accuracy_vs_length.png")


def accuracy_vs_length_figure(results, confidence: float):
    """Accuracy by example length per task, each PE's mean over seeds with its interval band (where the seeds give
    one). The figure's long title is wrapped to the figure's width, so two panels do not cut it at both ends."""
    tasks, pes = _tasks_pes(results)
    fig, axes = plt.subplots(1, len(tasks), figsize=(max(4 * len(tasks), 6), 3.6), squeeze=False)
    groups = _by_task_pe(results)
    for i, task in enumerate(tasks):
        ax = axes[0][i]
        for pe in pes:
            per_len = defaultdict(list)
            for c in groups.get((task, pe), []):
                for length, acc in c.acc_by_length.items():
                    per_len[int(length)].append(acc)
            if per_len:
                xs = sorted(per_len)
                stats = [interval(per_len[x], confidence, bounds=(0.0, 1.0)) for x in xs]
                ax.plot(xs, [100 * s.mean for s in stats], marker=".", color=pe_colour(pe), label=pe)
                if all(s.lo is not None for s in stats):
                    ax.fill_between(xs, [100 * s.band()[0] for s in stats], [100 * s.band()[1] for s in stats],
                                    color=pe_colour(pe), alpha=0.15, lw=0)
        task_cells = [c for (t, _), cs in groups.items() if t == task for c in cs]
        # end of the training lengths
        ax.axvline(task_cells[0].seq_len + 0.5, color="grey", ls="--", lw=1, label="training length")
        ax.set_title(f"{task}: by example length")
        ax.set_xlabel("example length (tokens)")
        ax.set_ylim(0, 102)
    axes[0][0].set_ylabel("accuracy %, all positions")
    axes[0][0].legend(fontsize=8)
    title = (f"Accuracy over all target positions of the ID and OOD examples of each length (mean over seeds, "
             f"{confidence:.0%} band): past the training length this mixes in-range positions in; see "
             "accuracy_by_position.png")
    width_chars = int(fig.get_figwidth() * 72 / 5.5)  # about 5.5 points per character at 9 pt
    fig.suptitle(textwrap.fill(title, width_chars), fontsize=9)
    fig.tight_layout()
    return fig


def accuracy_by_position(results, out_dir: Path, confidence: float) -> str | None:
    """The OOD examples' accuracy at each target position, mean over seeds with a CI band, a line at the
    training length: where a PE stops being right is the question extrapolation asks."""
    results = [r for r in results if r.ood_by_position]
    if not results:
        return None
    tasks, pes = _tasks_pes(results)
    fig, axes = plt.subplots(len(tasks), 1, figsize=(8, 2.8 * len(tasks)), squeeze=False)
    groups = _by_task_pe(results)
    for i, task in enumerate(tasks):
        ax = axes[i][0]
        for pe in pes:
            cells = groups.get((task, pe), [])
            if not cells:
                continue
            n = min(len(c.ood_by_position) for c in cells)
            stats = [interval([c.ood_by_position[t] for c in cells], confidence, n_boot=2000, bounds=ACC)
                     for t in range(n)]
            xs = [t for t in range(n) if stats[t].mean is not None]
            if not xs:
                continue
            ax.plot(xs, [100 * stats[t].mean for t in xs], lw=1.2, color=pe_colour(pe), label=pe)
            ax.fill_between(xs, [100 * stats[t].band()[0] for t in xs], [100 * stats[t].band()[1] for t in xs],
                            color=pe_colour(pe), alpha=0.2)
        first = next(c for c in results if c.task == task)
        ax.axvline(first.seq_len, color="black", ls="--", lw=1, label="training length (right: beyond it)")
        _accuracy_axes(ax, f"{task}: OOD examples, accuracy at each target position", "target position",
                       first.chance)
    axes[0][0].legend(fontsize=8)
    return _save(fig, out_dir, "accuracy_by_position.png")


def attention_maps(results, out_dir: Path, task: str) -> str | None:
    """Layers x heads for one ID example per PE (first seed's final model); rows without attention
    (Mamba) are left out, and a task none of whose rows has attention gets no figure."""
    chosen = {}
    for r in sorted(results, key=lambda r: r.seed):
        if r.task == task and r.pe not in chosen and r.attention is not None and r.attention.probs:
            chosen[r.pe] = r
    if not chosen:
        return None
    n_layers = max(len(r.attention.probs) for r in chosen.values())
    n_heads = max(len(r.attention.probs[0]) for r in chosen.values())
    cols = n_layers * n_heads
    fig, axes = plt.subplots(len(chosen), cols, figsize=(1.6 * cols, 1.7 * len(chosen)), squeeze=False)
    for i, (pe, r) in enumerate(chosen.items()):
        for layer, heads in enumerate(r.attention.probs):
            for h, probs in enumerate(heads):
                ax = axes[i][layer * n_heads + h]
                ax.imshow(np.array(probs), cmap="viridis", vmin=0, vmax=1)
                ax.set_xticks([])
                ax.set_yticks([])
                if i == 0:
                    ax.set_title(f"L{layer} H{h}", fontsize=8)
        axes[i][0].set_ylabel(pe, fontsize=9)
    fig.suptitle(f"{task}: attention (query rows, key columns)", fontsize=10)
    return _save(fig, out_dir, f"attention_{task}.png")


def exact_vs_digits(results, out_dir: Path, confidence: float) -> str | None:
    """accuracy_vs_digits.png: exact match % against digit count per PE, mean over seeds with a CI band."""
    groups = digit_groups(results)
    if not groups:
        return None
    tasks = list(dict.fromkeys(t for t, _ in groups))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for (t, pe), by in groups.items():
            if t != task:
                continue
            xs = sorted(by)
            stats = [interval(by[x], confidence, n_boot=2000, bounds=ACC) for x in xs]
            ys = [100 * s.mean for s in stats]
            ax.plot(xs, ys, marker=".", color=pe_colour(pe), label=pe)
            ax.fill_between(xs, [100 * s.band()[0] for s in stats], [100 * s.band()[1] for s in stats],
                            color=pe_colour(pe), alpha=0.15, lw=0)
        trained = trained_digits(results, task)
        if trained is not None:
            ax.axvline(trained + 0.5, color="grey", ls="--", lw=1, label="longest training operand")
        ax.set_title(f"{task}: exact match by digits per operand", fontsize=10)
        ax.set_xlabel("digits (longer operand)")
        ax.set_ylim(0, 102)
    axes[0][0].set_ylabel(f"exact match % (mean, {int(100 * confidence)}% CI over seeds)")
    axes[0][0].legend(fontsize=8)
    return _save(fig, out_dir, "accuracy_vs_digits.png")


def _save(fig, out_dir: Path, name: str, layout: bool = True) -> str:
    if layout:
        fig.tight_layout()
    # fixed metadata: identical inputs give byte-identical files
    with atomic_open(out_dir / name, "wb") as f:  # a temp file renamed into place: never through a link
        fig.savefig(f, format="png", dpi=110, metadata={"Software": None})
    # the same figure as a vector PDF for a paper; fixed metadata, so identical inputs give identical files
    with atomic_open((out_dir / name).with_suffix(".pdf"), "wb") as f:
        fig.savefig(f, format="pdf", metadata={"Creator": None, "Producer": None, "CreationDate": None})
    plt.close(fig)
    return name


def all_plots(results, out_dir: Path, confidence: float) -> list[str]:
    tasks, _ = _tasks_pes(results)
    names = [learning_curves(results, out_dir, confidence), id_ood_bars(results, out_dir, confidence),
             accuracy_vs_length(results, out_dir, confidence), accuracy_by_position(results, out_dir, confidence),
             exact_vs_digits(results, out_dir, confidence)]
    names += long_context_plots(results, out_dir)
    return [n for n in names + [attention_maps(results, out_dir, t) for t in tasks] if n]
