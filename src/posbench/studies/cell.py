"""One study cell: train a small model on one task with one PE and seed through the project's own
trainer, scoring its checkpoints in and out of distribution as training reaches them (in memory: the
trainer's `snapshots`). The result is a plain dict."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from posbench.data.tasks.source import TaskSource, eval_batch, pad_positions
from posbench.data.tasks.task import build_task
from posbench.evaluation.task_accuracy import attention_probs, generated_exact, score_rows
from posbench.studies.cell_config import cell_config
from posbench.studies.row_cache import CachedRows
from posbench.studies.study_spec import Cell
from posbench.training.loggers import read_metrics_text
from posbench.training.loop import train


class CpuPhases:
    """CPU seconds of this process (all threads) per phase of a cell, for `scripts/bench_study.py`: each
    `lap(phase)` books the time since the previous lap. Kept beside the cell's log, never in its result."""

    def __init__(self, since: float | None = None):
        self.seconds: dict[str, float] = {}
        self._t = time.process_time() if since is None else since

    def lap(self, phase: str) -> None:
        now = time.process_time()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._t
        self._t = now


def run_cell(cell: Cell, work_dir: Path, phases: CpuPhases | None = None) -> dict:
    phases = phases or CpuPhases()
    task = build_task(cell.task)
    cfg = cell_config(cell, task, work_dir)
    torch.set_num_threads(1)  # cells run in parallel processes; one thread each is fastest here
    shutil.rmtree(work_dir / cell.cell_id, ignore_errors=True)  # an interrupted attempt starts over
    st = cell.study.train
    phases.lap("startup")
    source = CachedRows(TaskSource(task, cfg.model.seq_len, cell.seed, n_val=64), st.steps * st.batch_size,
                        work_dir / "rows")
    ev = cell.study.eval
    splits = {s: eval_batch(task, ev.seed, s, range(ev.n_examples)) for s in ("id", "ood")}
    # the task's own position ids (arithmetic's digit places), fed at evaluation as in training
    positions = {s: pad_positions(examples, x.shape[1]) for s, (examples, x, _) in splits.items()}
    phases.lap("rows")

    # The learning curve: the trainer hands over the model at each checkpoint step (in memory, no disk
    # round trip) and at the end. Every snapshot is scored as the final model is, so the last one is the
    # final result (accuracy does not depend on train_len, which only splits it by position).
    curve, scores, final_model = [], {}, []

    def score_snapshot(step: int, model) -> None:
        phases.lap("train")
        scores.update({split: score_rows(model, x, y, train_len=cfg.model.seq_len, positions_BT=positions[split])
                       for split, (_, x, y) in splits.items()})
        # beyond: OOD targets past the training length only, the headline metric, at every snapshot too
        curve.append({"step": step, **{f"{split}_acc": score.acc for split, score in scores.items()},
                      "ood_beyond_acc": scores["ood"].beyond})
        final_model[:] = [model]
        phases.lap("eval")

    out = train(cfg, source, snapshots=score_snapshot)
    run_dir = Path(out["run_dir"])
    phases.lap("train")

    model = final_model[0].eval()
    final = {}
    by_length: dict[int, list[float]] = {}
    # exact match per length bin (the arithmetic tasks' digits per operand), by greedy decoding with the KV cache
    # and the task's position ids: what the papers report, scored by generation as a user would run the model
    by_digits: dict[int, list[float]] = {}
    for split, (examples, _, _) in splits.items():
        score = scores[split]
        final.update({f"{split}_acc": score.acc, f"{split}_exact": score.exact, f"{split}_loss": score.loss})
        for ex, acc in zip(examples, score.per_example):
            by_length.setdefault(len(ex.tokens_T), []).append(acc)
        if task.length_bin is not None:
            exact = generated_exact(model, task, examples)
            final[f"{split}_generated_exact"] = None if exact is None else float(np.mean(exact))
            for ex, hit in zip(examples, exact or [], strict=False):
                by_digits.setdefault(int(ex.info[task.length_bin]), []).append(hit)
        if split == "ood":  # extrapolation on its own: targets past the training length (the OOD split mixes both)
            final.update({"ood_beyond_acc": score.beyond, "ood_within_acc": score.within,
                          "ood_by_position": [None if n == 0 else c / n for c, n in score.per_position or []]})
    # the generalisation gap against extrapolation proper (beyond the training length), when there is any
    ood = final["ood_beyond_acc"] if final.get("ood_beyond_acc") is not None else final["ood_acc"]
    final["gap"] = None if ood is None else final["id_acc"] - ood
    examples, x, _ = splits["id"]
    length = len(examples[0].tokens_T)
    pos = positions["id"]
    attn = attention_probs(model, x[:1, :length], None if pos is None else pos[:1, :length])
    losses = [json.loads(line) for line in read_metrics_text(run_dir / "metrics.jsonl").splitlines()]
    shutil.rmtree(run_dir, ignore_errors=True)
    phases.lap("eval")
    return {"cell_id": cell.cell_id, "task": cell.task.name, "pe": cell.label, "seed": cell.seed,
            "arch": cfg.model.arch.name, "data_note": task.data_note,
            "axes": cell.axes, "chance": task.chance_accuracy, **final, "curve": curve,
            "train_loss": [{"step": r["step"], "loss": r["loss"]} for r in losses if "loss" in r],
            "acc_by_length": {int(k): float(np.mean(v)) for k, v in sorted(by_length.items())},
            "exact_by_digits": {int(k): float(np.mean(v)) for k, v in sorted(by_digits.items())},
            "id_digits": task.cfg.split_range("id")[1] if task.length_bin else None,  # the longest trained bin
            "attention": {"tokens": task.vocab.decode(examples[0].tokens_T.tolist()), "probs": attn},
            "seq_len": cfg.model.seq_len, "ood_len": task.max_tokens("ood"), "params": sum(
                p.numel() for p in model.parameters())}
