"""A sweep's plots, side by side per PE: loss vs tokens, perplexity vs length, task accuracy ID vs OOD,
passkey / NIAH accuracy over length x depth. Means over seeds; one colour per PE in every figure, the same
as in the study plots and the app (posbench.palette).

Task accuracy says which it is: exact match of whole answers (ID; OOD, which counts every answer token,
those inside the training length too) and, the extrapolation measure, the share of answer tokens predicted
beyond the training length that are right. A value that is n/a is written "n/a", never drawn as 0."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402

from posbench.palette import HEATMAP_RANGE, HEATMAP_SCALE, pe_colour  # noqa: E402
from posbench.studies.long_context_report import suite_of  # noqa: E402
from posbench.sweeps.sweep_report import _algorithmic, _ppl, metrics_rows  # noqa: E402
from posbench.sweeps.sweep_spec import Run  # noqa: E402


def _colors(pes: list[str]) -> dict[str, str]:
    return {pe: pe_colour(pe) for pe in pes}


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    # the same figure as a vector PDF for a paper; fixed metadata, so identical inputs give identical files
    fig.savefig(path.with_suffix(".pdf"), metadata={"Creator": None, "Producer": None, "CreationDate": None})
    plt.close(fig)
    return path


def loss_vs_tokens(runs: list[Run], path: Path) -> Path:
    groups = list(dict.fromkeys(r.group for r in runs if not r.parent))
    colors = _colors(list(dict.fromkeys(r.pe for r in runs)))
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 3.6), squeeze=False)
    for ax, group in zip(axes[0], groups):
        for pe in colors:
            curves = [[(r["tokens"], r["loss"]) for r in metrics_rows(run) if "loss" in r]
                      for run in runs if run.group == group and run.pe == pe and not run.parent]
            curves = [c for c in curves if c]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            x = [t for t, _ in curves[0][:n]]
            y = np.mean([[v for _, v in c[:n]] for c in curves], axis=0)
            ax.plot(x, y, color=colors[pe], label=pe)
        ax.set(title=group, xlabel="tokens", ylabel="train loss")
        if ax.lines:  # runs without a loss curve yet (a report made mid-sweep) leave the panel empty
            ax.legend(fontsize=8)
    return _save(fig, path)


def ppl_vs_length(runs: list[Run], results: dict, path: Path) -> Path:
    colors = _colors(list(dict.fromkeys(r.pe for r in runs)))
    groups = list(dict.fromkeys(r.group for r in runs))
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 3.6), squeeze=False)
    for ax, group in zip(axes[0], groups):
        for pe in colors:
            by_len = defaultdict(list)
            for run in runs:
                if run.group == group and run.pe == pe and run.name in results:
                    for length, ppl in _ppl(results[run.name]).items():
                        if ppl is not None:
                            by_len[length].append(ppl)
            if by_len:
                xs = sorted(by_len)
                ax.plot(xs, [np.mean(by_len[x]) for x in xs], marker="o", color=colors[pe], label=pe)
        ppl_axes(ax, group, next(r.cfg.model.seq_len for r in runs if r.group == group))
        ax.legend(fontsize=8)
    return _save(fig, path)


def ppl_axes(ax, group: str, train_len: int) -> None:
    """A perplexity panel's axes (called once its curves are drawn): log-log, the training length marked.
    Perplexities often span less than a decade, where matplotlib's log axis labels every minor tick in scientific
    form (4.25x10^0, 4.3x10^0, ...) and the labels crowd: such an axis gets a few plain numbers at round values, a
    wider one plain numbers at its decades only."""
    ax.axvline(train_len, color="grey", linestyle=":", label="training length")
    ax.set(title=group, xlabel="context length (tokens)", ylabel="perplexity", xscale="log", yscale="log")
    lo, hi = ax.get_ylim()
    plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
    if hi / lo < 10:
        ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


# (panel title, the cell's value): whole-answer exact match per split, then answer tokens beyond the training length
TASK_PANELS = (("ID: exact match (whole answers)", "id", "accuracy"),
               ("OOD, all positions: exact match (whole answers)", "ood", "accuracy"),
               ("OOD beyond train length: answer tokens right", "ood", "beyond_accuracy"))


def task_accuracy(runs: list[Run], results: dict, path: Path) -> Path | None:
    colors = _colors(list(dict.fromkeys(r.pe for r in runs)))
    acc = defaultdict(list)  # (task, split, key, pe) -> values over runs (zero-shot)
    tasks = []
    for run in runs:
        for c in _algorithmic(results.get(run.name, {"suites": {}})):
            if c["shots"] != 0:
                continue
            tasks.append(c["task"])
            for key in ("accuracy", "beyond_accuracy"):
                if c.get(key) is not None and (key == "accuracy" or c.get("n_beyond")):
                    acc[(c["task"], c["split"], key, run.pe)].append(c[key])
    tasks = list(dict.fromkeys(tasks))
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(TASK_PANELS), figsize=(max(12, 1.6 * len(tasks) * 3), 4.0), squeeze=False)
    width = 0.8 / len(colors)
    for ax, (title, split, key) in zip(axes[0], TASK_PANELS):
        for i, pe in enumerate(colors):
            for t, task in enumerate(tasks):
                vals = acc[(task, split, key, pe)]
                x = t + i * width
                if vals:
                    ax.bar(x, np.mean(vals), width, color=colors[pe], label=pe if t == 0 else None)
                else:  # n/a (too long for the PE, or no answer token past the training length): said, not drawn
                    ax.text(x, 0.02, "n/a", ha="center", va="bottom", rotation=90, fontsize=6, color="grey")
        ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks, rotation=30, ha="right", fontsize=8)
        ax.set(title=title.replace(": ", ":\n"), ylim=(0, 1), xlim=(-width, len(tasks) - 0.2),
               ylabel="share right (mean over seeds)")
        ax.title.set_fontsize(9)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Zero-shot task accuracy", fontsize=10)
    return _save(fig, path)


def retrieval_heatmaps(runs: list[Run], results: dict, suite: str, path: Path) -> Path | None:
    pes = list(dict.fromkeys(r.pe for r in runs))
    grids = {}
    for pe in pes:
        cells = defaultdict(list)
        for run in runs:
            if run.pe == pe and run.name in results:
                for c in results[run.name]["suites"].get(suite, {}).get("cells", []):
                    cells[(c["length"], c["depth"])].append(c["accuracy"])
        if cells:
            grids[pe] = cells
    if not grids:
        return None
    fig, axes = plt.subplots(1, len(grids), figsize=(3.4 * len(grids), 3.2), squeeze=False)
    for ax, (pe, cells) in zip(axes[0], grids.items()):
        lengths = sorted({k[0] for k in cells})
        depths = sorted({k[1] for k in cells})
        z = np.array([[np.nan if any(v is None for v in cells[(L, d)]) else 100 * np.mean(cells[(L, d)])
                       for L in lengths] for d in depths])
        cmap = matplotlib.colormaps[HEATMAP_SCALE].with_extremes(bad="lightgrey")  # the app's scale, in percent
        ax.imshow(np.ma.masked_invalid(z), vmin=HEATMAP_RANGE[0], vmax=HEATMAP_RANGE[1], cmap=cmap, aspect="auto",
                  origin="lower")
        for (y, x), v in np.ndenumerate(z):  # every cell says its value; n/a cells are grey and say so
            ax.text(x, y, "n/a" if np.isnan(v) else f"{v:.0f}", ha="center", va="center", fontsize=6,
                    color="black" if np.isnan(v) or v > 50 else "white")
        ax.set_xticks(range(len(lengths)), lengths, fontsize=7, rotation=45)
        ax.set_yticks(range(len(depths)), depths, fontsize=7)
        ax.set(title=f"{suite}: {pe} (accuracy %)", xlabel="length (tokens)", ylabel="depth")
    return _save(fig, path)


def all_plots(runs: list[Run], results: dict, out_dir: Path) -> list[Path]:
    plots = [loss_vs_tokens(runs, out_dir / "plots" / "loss_vs_tokens.png")]
    if any("ppl" in r["suites"] for r in results.values()):
        plots.append(ppl_vs_length(runs, results, out_dir / "plots" / "ppl_vs_length.png"))
    plots.append(task_accuracy(runs, results, out_dir / "plots" / "task_accuracy.png"))
    for suite in ("passkey", "niah"):
        plots.append(retrieval_heatmaps(runs, results, suite, out_dir / "plots" / f"{suite}_heatmaps.png"))
    families = dict.fromkeys(f for r in runs for f in (suite_of(results.get(r.name)) or {}).get("families", {}))
    for family in families:  # each family's grid, as a suite of its own
        view = {name: {"suites": {family: lc["families"][family]}} for name, r in results.items()
                if (lc := suite_of(r)) and family in lc["families"]}
        plots.append(retrieval_heatmaps(runs, view, family, out_dir / "plots" / f"long_context_{family}_heatmaps.png"))
    return [p for p in plots if p is not None]
