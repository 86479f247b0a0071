"""Study plots (matplotlib, Agg): learning curves with CI bands, ID vs OOD bars with CIs, accuracy vs
sequence length, attention maps. Each function writes one PNG and returns its file name."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posbench.fileio import atomic_open  # noqa: E402
from posbench.stats import bootstrap_ci  # noqa: E402


def _by(results, *keys):
    out = defaultdict(list)
    for r in results:
        out[tuple(r[k] if k != "axes" else tuple(sorted(r["axes"].items())) for k in keys)].append(r)
    return out


def _tasks_pes(results):
    tasks = list(dict.fromkeys(r["task"] for r in results))
    pes = list(dict.fromkeys(r["pe"] for r in results))
    return tasks, pes


def learning_curves(results, out_dir: Path, confidence: float) -> str:
    tasks, pes = _tasks_pes(results)
    fig, axes = plt.subplots(len(tasks), 2, figsize=(10, 2.8 * len(tasks)), squeeze=False)
    groups = _by(results, "task", "pe")
    for i, task in enumerate(tasks):
        for j, split in enumerate(("id", "ood")):
            ax = axes[i][j]
            for pe in pes:
                cells = groups.get((task, pe), [])
                if not cells:
                    continue
                steps = [row["step"] for row in cells[0]["curve"]]
                stats = [bootstrap_ci([c["curve"][k][f"{split}_acc"] for c in cells if k < len(c["curve"])],
                                      confidence, 2000) for k in range(len(steps))]
                if any(s.mean is None for s in stats):
                    continue
                mean = [100 * s.mean for s in stats]
                ax.plot(steps, mean, marker="o", ms=3, label=pe)
                ax.fill_between(steps, [100 * s.lo for s in stats], [100 * s.hi for s in stats], alpha=0.2)
            _accuracy_axes(ax, f"{task}: {split.upper()} accuracy", "step", cells[0]["chance"])
    axes[0][0].legend(fontsize=8)
    return _save(fig, out_dir, "learning_curves.png")


def _accuracy_axes(ax, title: str, xlabel: str, chance: float) -> None:
    """Accuracy in % on 0..102 with the chance level dotted."""
    ax.axhline(100 * chance, color="grey", ls=":", lw=1)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy %")
    ax.set_ylim(0, 102)


def id_ood_bars(results, out_dir: Path, confidence: float) -> str:
    tasks, pes = _tasks_pes(results)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.4), squeeze=False)
    groups = _by(results, "task", "pe")
    width = 0.38
    for i, task in enumerate(tasks):
        ax = axes[0][i]
        for k, split in enumerate(("id", "ood")):
            stats = [bootstrap_ci([c[f"{split}_acc"] for c in groups.get((task, pe), [])], confidence, 2000)
                     for pe in pes]
            mean = np.array([100 * (s.mean or 0) for s in stats])
            err = np.array([[100 * ((s.mean or 0) - (s.lo or 0)) for s in stats],
                            [100 * ((s.hi or 0) - (s.mean or 0)) for s in stats]])
            ax.bar(np.arange(len(pes)) + (k - 0.5) * width, mean, width, yerr=err, capsize=3, label=split.upper())
        ax.set_xticks(np.arange(len(pes)), pes, rotation=30, fontsize=8)
        ax.set_title(task)
        ax.set_ylim(0, 105)
    axes[0][0].set_ylabel("accuracy %")
    axes[0][0].legend(fontsize=8)
    return _save(fig, out_dir, "id_ood_bars.png")


def accuracy_vs_length(results, out_dir: Path) -> str:
    tasks, pes = _tasks_pes(results)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.2), squeeze=False)
    groups = _by(results, "task", "pe")
    for i, task in enumerate(tasks):
        ax = axes[0][i]
        for pe in pes:
            per_len = defaultdict(list)
            for c in groups.get((task, pe), []):
                for length, acc in c["acc_by_length"].items():
                    per_len[int(length)].append(acc)
            if per_len:
                xs = sorted(per_len)
                ax.plot(xs, [100 * np.mean(per_len[x]) for x in xs], marker=".", label=pe)
        task_cells = [c for (t, _), cs in groups.items() if t == task for c in cs]
        ax.axvline(task_cells[0]["seq_len"] + 0.5, color="grey", ls="--", lw=1)  # end of the training lengths
        ax.set_title(task)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylim(0, 102)
    axes[0][0].set_ylabel("accuracy %")
    axes[0][0].legend(fontsize=8)
    return _save(fig, out_dir, "accuracy_vs_length.png")


def accuracy_by_position(results, out_dir: Path, confidence: float) -> str | None:
    """OOD accuracy at each target position, mean over seeds with a CI band, a line at the training length:
    where a PE stops being right is the question extrapolation asks."""
    results = [r for r in results if r.get("ood_by_position")]
    if not results:
        return None
    tasks, pes = _tasks_pes(results)
    fig, axes = plt.subplots(len(tasks), 1, figsize=(8, 2.8 * len(tasks)), squeeze=False)
    groups = _by(results, "task", "pe")
    for i, task in enumerate(tasks):
        ax = axes[i][0]
        for pe in pes:
            cells = groups.get((task, pe), [])
            if not cells:
                continue
            n = min(len(c["ood_by_position"]) for c in cells)
            stats = [bootstrap_ci([c["ood_by_position"][t] for c in cells], confidence, 2000) for t in range(n)]
            xs = [t for t in range(n) if stats[t].mean is not None]
            if not xs:
                continue
            ax.plot(xs, [100 * stats[t].mean for t in xs], lw=1.2, label=pe)
            ax.fill_between(xs, [100 * stats[t].lo for t in xs], [100 * stats[t].hi for t in xs], alpha=0.2)
        first = next(c for c in results if c["task"] == task)
        ax.axvline(first["seq_len"], color="black", ls="--", lw=1, label="training length")
        _accuracy_axes(ax, f"{task}: OOD accuracy by target position", "position", first["chance"])
    axes[0][0].legend(fontsize=8)
    return _save(fig, out_dir, "accuracy_by_position.png")


def attention_maps(results, out_dir: Path, task: str) -> str | None:
    """Layers x heads for one ID example per PE (first seed's final model); rows without attention
    (Mamba) are left out, and a task none of whose rows has attention gets no figure."""
    chosen = {}
    for r in sorted(results, key=lambda r: r["seed"]):
        if r["task"] == task and r["pe"] not in chosen and r["attention"]["probs"]:
            chosen[r["pe"]] = r
    if not chosen:
        return None
    n_layers = max(len(r["attention"]["probs"]) for r in chosen.values())
    n_heads = max(len(r["attention"]["probs"][0]) for r in chosen.values())
    cols = n_layers * n_heads
    fig, axes = plt.subplots(len(chosen), cols, figsize=(1.6 * cols, 1.7 * len(chosen)), squeeze=False)
    for i, (pe, r) in enumerate(chosen.items()):
        for layer, heads in enumerate(r["attention"]["probs"]):
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


def _save(fig, out_dir: Path, name: str) -> str:
    fig.tight_layout()
    # fixed metadata: identical inputs give byte-identical files
    with atomic_open(out_dir / name, "wb") as f:  # a temp file renamed into place: never through a link
        fig.savefig(f, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return name


def all_plots(results, out_dir: Path, confidence: float) -> list[str]:
    tasks, _ = _tasks_pes(results)
    names = [learning_curves(results, out_dir, confidence), id_ood_bars(results, out_dir, confidence),
             accuracy_vs_length(results, out_dir), accuracy_by_position(results, out_dir, confidence)]
    return [n for n in names + [attention_maps(results, out_dir, t) for t in tasks] if n]
