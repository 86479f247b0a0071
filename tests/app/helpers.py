"""Hand-made study cells and eval payloads for the app tests (the numbers are chosen so the summaries can
be checked by hand)."""

import json
from pathlib import Path

MAIN = str(Path(__file__).resolve().parents[2] / "src" / "posbench" / "app" / "main.py")

# the run page's form values of a 2-cell study that trains in seconds
TINY = {"name": "tiny", "tasks": "{name: k_back, k: 2}", "pes": ["rope", "learned"], "seeds": "0", "steps": 4,
        "batch_size": 4, "lr": 3e-3, "workers": 1, "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32,
        "other_overrides": [], "eval": {"n_examples": 8, "n_boot": 200}}


def cell(pe: str, seed: int, id_acc: float, ood_acc: float) -> dict:
    # no ood_beyond_acc: a study written before that metric existed must still open (shown as n/a)
    return {"cell_id": f"k_back_{pe}_s{seed}", "task": "k_back", "pe": pe, "seed": seed, "axes": {}, "chance": 0.5,
            "id_acc": id_acc, "ood_acc": ood_acc, "id_loss": 0.5, "ood_loss": 0.9, "gap": id_acc - ood_acc,
            "curve": [{"step": 5, "id_acc": id_acc / 2, "ood_acc": ood_acc / 2},
                      {"step": 10, "id_acc": id_acc, "ood_acc": ood_acc}],
            "train_loss": [{"step": 1, "loss": 2.0}, {"step": 10, "loss": 1.0}],
            "ood_by_position": [None, 1.0, 0.5, 0.0], "seq_len": 2,
            "attention": {"tokens": ["a", "b", "c"],
                          "probs": [[[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]] * 2]}}  # 1 layer, 2 heads


def write_study(out: Path) -> Path:
    out.mkdir(parents=True)
    cells = [cell("rope", 0, 0.5, 0.4), cell("rope", 1, 0.7, 0.6), cell("alibi", 0, 0.9, 0.9),
             cell("alibi", 1, 0.9, 0.8)]
    (out / "results.json").write_text(json.dumps({"study": "hand", "cells": cells}))
    return out


def eval_payload(label: str, ppl: list[float], needle: list[float | None]) -> dict:
    lengths = [16, 32]
    return {"label": label, "step": 10, "checkpoint": f"/nonexistent/{label}/step_10", "suites": {
        "ppl": {"train_len": 16, "protocols": ["nonoverlap"],
                "rows": [{"length": L, "nonoverlap": {"ppl": p, "loss": 0.0}, "na": None}
                         for L, p in zip(lengths, ppl)]},
        "niah": {"lengths": lengths, "depths": [0.5], "by_length": {str(L): a for L, a in zip(lengths, needle)},
                 "cells": [{"length": L, "depth": 0.5, "accuracy": a, "na": None if a is not None else "too long"}
                           for L, a in zip(lengths, needle)]}}}


def pe_traces(fig: dict) -> list[dict]:
    """A chart's PE lines: without their interval bands and the reference lines' legend entries (chance, the
    training length)."""
    return [t for t in fig["data"] if t.get("fill") != "toself"
            and not str(t.get("name", "")).startswith(("chance", "training length"))]
