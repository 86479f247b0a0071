"""A sweep's plots, side by side per PE: loss vs tokens, perplexity vs length, task accuracy ID vs OOD,
passkey / NIAH accuracy over length x depth. Means over seeds; one colour per PE in every figure."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posbench.sweeps.sweep_report import _algorithmic, _ppl, metrics_rows  # noqa: E402
from posbench.sweeps.sweep_spec import Run  # noqa: E402


def _colors(pes: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {pe: cmap(i % 10) for i, pe in enumerate(pes)}


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
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
        train_len = next(r.cfg.model.seq_len for r in runs if r.group == group)
        ax.axvline(train_len, color="grey", linestyle=":", label="training length")
        ax.set(title=group, xlabel="context length (tokens)", ylabel="perplexity", xscale="log", yscale="log")
        ax.legend(fontsize=8)
    return _save(fig, path)


def task_accuracy(runs: list[Run], results: dict, path: Path) -> Path | None:
    colors = _colors(list(dict.fromkeys(r.pe for r in runs)))
    acc = defaultdict(list)  # (task, split, pe) -> values over runs (zero-shot)
    for run in runs:
        for c in _algorithmic(results.get(run.name, {"suites": {}})):
            if c["shots"] == 0 and c["accuracy"] is not None:
                acc[(c["task"], c["split"], run.pe)].append(c["accuracy"])
    tasks = list(dict.fromkeys(k[0] for k in acc))
    if not tasks:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(tasks) * 2), 3.8), squeeze=False)
    width = 0.8 / len(colors)
    for ax, split in zip(axes[0], ("id", "ood")):
        for i, pe in enumerate(colors):
            ys = [np.mean(acc[(t, split, pe)]) if acc[(t, split, pe)] else 0.0 for t in tasks]
            ax.bar(np.arange(len(tasks)) + i * width, ys, width, color=colors[pe], label=pe)
        ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks, rotation=30, ha="right", fontsize=8)
        ax.set(title=f"zero-shot exact match, {split.upper()}", ylim=(0, 1))
        ax.legend(fontsize=7)
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
        z = np.array([[np.nan if any(v is None for v in cells[(L, d)]) else np.mean(cells[(L, d)])
                       for L in lengths] for d in depths])
        ax.imshow(z, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        ax.set_xticks(range(len(lengths)), lengths, fontsize=7, rotation=45)
        ax.set_yticks(range(len(depths)), depths, fontsize=7)
        ax.set(title=f"{suite}: {pe}", xlabel="length", ylabel="depth")
    return _save(fig, path)


def all_plots(runs: list[Run], results: dict, out_dir: Path) -> list[Path]:
    plots = [loss_vs_tokens(runs, out_dir / "plots" / "loss_vs_tokens.png")]
    if any("ppl" in r["suites"] for r in results.values()):
        plots.append(ppl_vs_length(runs, results, out_dir / "plots" / "ppl_vs_length.png"))
    plots.append(task_accuracy(runs, results, out_dir / "plots" / "task_accuracy.png"))
    for suite in ("passkey", "niah"):
        plots.append(retrieval_heatmaps(runs, results, suite, out_dir / "plots" / f"{suite}_heatmaps.png"))
    return [p for p in plots if p is not None]
