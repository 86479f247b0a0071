"""One study cell: train a small model on one task with one PE and seed through the project's own
trainer, scoring its checkpoints in and out of distribution as training reaches them (in memory: the
trainer's `snapshots`). The result is a `CellResult` (studies/cell_result.py). Cells that differ only in seed
train as one batched model (`run_group`) and are scored the same way."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from posbench.data.tasks.source import TaskSource, eval_batch, pad_positions
from posbench.data.tasks.task import build_task
from posbench.errors import NonFiniteError
from posbench.evaluation.dope import Dope, NoDope, check_dope
from posbench.evaluation.scaling import check_rope_scaling, scaled
from posbench.evaluation.task_accuracy import attention_probs, generated_exact, model_device, score_rows
from posbench.model.build import build_model
from posbench.model.matmul import matmul_in
from posbench.studies.batched_train import BatchedGroup, MembersDiffer, train_group, why_not_batched
from posbench.studies.cell_config import cell_config
from posbench.studies.cell_result import Attention, CellResult, CurvePoint
from posbench.studies.length_grid import grid_result
from posbench.studies.row_cache import CachedRows
from posbench.studies.study_spec import Cell
from posbench.studies.training_twins import twin_sets
from posbench.training.device import device_name
from posbench.training.loggers import read_metrics_text
from posbench.training.loop import train

# Bytes one scoring forward may hold in a worker: two workers on a 24 GB machine stay clear of the OOM killer.
SCORE_BYTES = 2 * 2**30
# float32 (B, H, T, T) matrices a forward of the eager, logits_mod PEs holds at its peak: stick-breaking's 8 rows
# of 1,024 tokens, 4 heads, peak at 1.08 GB resident, about 8; twice that leaves room for the others' temporaries
SCORE_MATRICES = 16


def scoring_rows(n_heads: int, T: int, most: int = 256) -> int:
    """Rows per teacher-forced scoring forward: `most` for short rows; for long ones as many as keep SCORE_MATRICES
    score matrices within SCORE_BYTES (an OOD split of 128 rows of 1,024 tokens in one forward took 12.4 GB)."""
    return max(1, min(most, SCORE_BYTES // (SCORE_MATRICES * 4 * n_heads * T * T)))


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


class CellScoring:
    """One cell's data and scores: its config, its training rows (`CachedRows`), the eval rows, and the
    scores of every snapshot of its model (the learning curve; the last is the final result). The lone
    path (`run_cell`) and a batched seed group (`run_group`) both score through it, so their results
    have one format."""

    def __init__(self, cell: Cell, work_dir: Path, phases: CpuPhases, splits: dict | None = None,
                 matmul: str | None = None):
        self.cell, self.phases = cell, phases
        self.task = build_task(cell.task)
        self.cfg = cell_config(cell, self.task, work_dir, matmul)  # matmul: the study's measured choice
        st = cell.study.train
        phases.lap("startup")
        self.source = CachedRows(TaskSource(self.task, self.cfg.model.seq_len, cell.seed, n_val=64),
                                 st.steps * st.batch_size, work_dir / "rows")
        ev = cell.study.eval
        # the same examples for every seed of a cell (eval.seed): a group builds them once
        self.splits = splits or {s: eval_batch(self.task, ev.seed, s, range(ev.n_examples)) for s in ("id", "ood")}
        # the task's own position ids (arithmetic's digit places), fed at evaluation as in training
        self.positions = {s: pad_positions(examples, x.shape[1]) for s, (examples, x, _) in self.splits.items()}
        # an arm's evaluation-time options, checked against the cell's model (built on the meta device) before it trains
        self.scaling = cell.arm.rope_scaling if cell.arm is not None else None
        self.dope = self.dope_for(cell)
        phases.lap("rows")
        self.curve, self.scores = [], {}
        self.snapshot_dope = 0

    def dope_for(self, cell: Cell) -> Dope | NoDope:
        """The arm's DoPE (evaluation/dope.py), NoDope for every other row; with the arm's scaling, both checked."""
        dope = cell.arm.dope if cell.arm is not None else None
        if dope is None and self.scaling is None:
            return NoDope()
        with torch.device("meta"):
            meta = build_model(self.cfg.model, self.cfg.pe)
        check_rope_scaling(meta, self.scaling, cell.cell_id)
        check_dope(meta, dope, cell.cell_id)
        return NoDope() if dope is None else Dope(dope, self.cfg.model.seq_len, dope.n_calibration)

    def calibration_rows(self, split: str):
        """DoPE's calibration rows of a split: examples of the same split drawn with DoPE's own seed, each as long
        as it is (the split's rows vary in length; no padding enters the Gram)."""
        def rows(length: int, n: int, seed: int) -> list[torch.Tensor]:
            return [ex.tokens_T for ex in eval_batch(self.task, seed, split, range(n))[0]]
        return rows

    def score_snapshot(self, step: int, model) -> None:
        """Score the model at a checkpoint step (the trainer hands it over in memory, no disk round trip).
        Every snapshot is scored as the final model is (accuracy does not depend on train_len, which only
        splits it by position)."""
        self.phases.lap("train")
        self.snapshot_dope = len(self.dope.records)  # this snapshot's DoPE choices start here (the last: the result's)
        with scaled(model, self.scaling, self.cell.cell_id):  # the arm's evaluation-time scaling, restored after
            self.score_splits(model)
        # beyond: OOD targets past the training length only, the headline metric, at every snapshot too
        point = {"step": step, **{f"{split}_acc": score.acc for split, score in self.scores.items()},
                 "ood_beyond_acc": self.scores["ood"].beyond}
        if self.task.length_bin is not None:
            point["exact_by_digits"] = self.exact_by_bin()
        self.curve.append(point)
        self.phases.lap("eval")

    def score_splits(self, model) -> None:
        """Teacher-forced scores of the id and ood splits, each inside DoPE's choice for it (an arm's; else as is)."""
        self.scores = {}
        for split, (_, x, y) in self.splits.items():
            with self.dope.at(model, x.shape[1], self.calibration_rows(split), split):
                self.scores[split] = score_rows(model, x, y, train_len=self.cfg.model.seq_len,
                                                positions_BT=self.positions[split],
                                                batch_size=scoring_rows(self.cfg.model.n_heads, x.shape[1]))

    def exact_by_bin(self) -> dict[int, float]:
        """Exact match per length bin (digits per operand) of this snapshot, from the teacher-forced scores: a
        greedy decoder writes an answer right exactly when every answer token is the argmax given the right ones
        before it, so this is greedy decoding's exact match without decoding (the final model is also decoded,
        `generated_exact`, as a user would run it)."""
        by_bin: dict[int, list[float]] = {}
        for split, (examples, _, _) in self.splits.items():
            for ex, acc in zip(examples, self.scores[split].per_example, strict=True):
                by_bin.setdefault(int(ex.info[self.task.length_bin]), []).append(float(acc == 1.0))
        return {k: float(np.mean(v)) for k, v in sorted(by_bin.items())}

    def result(self, model, train_loss: list[dict]) -> CellResult:
        """The cell's result from its final model (scored last by `score_snapshot`) and its loss rows, with the
        arm's evaluation-time scaling on while it is decoded (the model as it trained after)."""
        with scaled(model, self.scaling, self.cell.cell_id):
            return self._result(model.eval(), train_loss)

    def _result(self, model, train_loss: list[dict]) -> CellResult:
        cell, task, cfg, scores = self.cell, self.task, self.cfg, self.scores
        final = {}
        by_length: dict[int, list[float]] = {}
        # exact match per length bin (the arithmetic tasks' digits per operand), by greedy decoding with the KV
        # cache and the task's position ids: what the papers report, scored by generation as a user would run it
        by_digits: dict[int, list[float]] = {}
        for split, (examples, x, _) in self.splits.items():
            score = scores[split]
            final.update({f"{split}_acc": score.acc, f"{split}_exact": score.exact, f"{split}_loss": score.loss})
            for ex, acc in zip(examples, score.per_example):
                by_length.setdefault(len(ex.tokens_T), []).append(acc)
            if task.length_bin is not None:
                with self.dope.at(model, x.shape[1], self.calibration_rows(split), f"{split}_generated"):
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
        examples, x, _ = self.splits["id"]
        length = len(examples[0].tokens_T)
        pos = self.positions["id"]
        attn = attention_probs(model, x[:1, :length], None if pos is None else pos[:1, :length])
        grid = grid_result(model, task, cell.study.eval.length_grid, cell.study.eval.seed, cfg.model.seq_len,
                           self.dope)
        self.phases.lap("eval")
        # keyword arguments: a misspelt or renamed field is a TypeError here, when the cell is made
        return CellResult(
            cell_id=cell.cell_id, task=cell.task.name, pe=cell.label, seed=cell.seed, arch=cfg.model.arch.name,
            data_note=task.data_note, device=device_name(model_device(model)),
            matmul=matmul_in(model),  # the linear layers' library that ran (model.matmul)
            axes=cell.axes, chance=task.chance_accuracy, **final, length_grid=grid.get("length_grid"),
            curve=[CurvePoint(**point) for point in self.curve], train_loss=train_loss,
            acc_by_length={int(k): float(np.mean(v)) for k, v in sorted(by_length.items())},
            exact_by_digits={int(k): float(np.mean(v)) for k, v in sorted(by_digits.items())},
            id_digits=task.cfg.split_range("id")[1] if task.length_bin else None,  # the longest trained bin
            attention=Attention(task.vocab.decode(examples[0].tokens_T.tolist()), attn),
            seq_len=cfg.model.seq_len, ood_len=task.max_tokens("ood"),
            params=sum(p.numel() for p in model.parameters()),
            # DoPE's choices for the final model: its last snapshot's splits, then what the result decoded (the
            # earlier snapshots' choices are the learning curve's)
            dope_heads=self.dope.records[self.snapshot_dope:] or None)


def kept_checkpoint(work_dir: Path, cell_id: str) -> Path:
    """Where a cell's run directory is kept with study.keep_checkpoints: <study>/checkpoints/<cell_id>."""
    return Path(work_dir).parent / "checkpoints" / cell_id


def run_cell(cell: Cell, work_dir: Path, phases: CpuPhases | None = None, matmul: str | None = None) -> CellResult:
    """One cell trained alone through the project's trainer (`training.loop.train`). `matmul`: the study's
    recorded library for model.matmul=auto (studies/study_matmul.py), None to resolve the setting here."""
    phases = phases or CpuPhases()
    return train_alone([CellScoring(cell, work_dir, phases, matmul=matmul)], work_dir, phases)[0]


def run_separately(cells: list[Cell], work_dir: Path, phases: CpuPhases, matmul: str | None) -> list[CellResult]:
    """Each cell trained alone, training twins (studies/training_twins.py) once for all of them."""
    scorings = [CellScoring(c, work_dir, phases, matmul=matmul) for c in cells]
    results: dict[int, CellResult] = {}
    for members in twin_sets([s.cfg for s in scorings]) if not cells[0].study.keep_checkpoints else \
            [[i] for i in range(len(cells))]:
        results.update(zip(members, train_alone([scorings[i] for i in members], work_dir, phases), strict=True))
    return [results[i] for i in range(len(cells))]


def train_alone(scorings: list[CellScoring], work_dir: Path, phases: CpuPhases) -> list[CellResult]:
    """The first scoring's cell trained alone, every scoring (its training twins) scored on that model."""
    cell, lead = scorings[0].cell, scorings[0]
    torch.set_num_threads(1)  # cells run in parallel processes; one thread each is fastest here
    shutil.rmtree(work_dir / cell.cell_id, ignore_errors=True)  # an interrupted attempt starts over
    final_model = []

    def score_snapshot(step: int, model) -> None:
        for scoring in scorings:
            scoring.score_snapshot(step, model)
        final_model[:] = [model]

    out = train(lead.cfg, lead.source, snapshots=score_snapshot)
    if out.get("stopped"):  # SIGTERM (a stopped study): a cell trained part way is not a result; the next run redoes it
        raise KeyboardInterrupt(f"{cell.cell_id}: stopped by a signal at step {out.get('step')}; not written")
    if out["late_signal"] is not None:  # Ctrl-C during the final checkpoint or scoring: the study stops here
        raise KeyboardInterrupt(f"{cell.cell_id}: stopped by a signal after its last step; not written")
    run_dir = Path(out["run_dir"])
    phases.lap("train")
    losses = [json.loads(line) for line in read_metrics_text(run_dir / "metrics.jsonl").splitlines()]
    if cell.study.keep_checkpoints:  # the whole run directory: its final checkpoint, config and metrics
        kept = kept_checkpoint(work_dir, cell.cell_id)
        shutil.rmtree(kept, ignore_errors=True)  # an earlier attempt's copy
        kept.parent.mkdir(parents=True, exist_ok=True)
        os.replace(run_dir, kept)
    shutil.rmtree(run_dir, ignore_errors=True)
    rows = [{"step": r["step"], "loss": r["loss"]} for r in losses if "loss" in r]
    return [scoring.result(final_model[0], rows) for scoring in scorings]


def run_group(cells: list[Cell], work_dir: Path, phases: CpuPhases | None = None,
              matmul: str | None = None) -> list[CellResult]:
    """Cells that differ only in seed or stackable PE options (studies/seed_groups.py) trained as one batched
    model (studies/batched_train.py), each scored as `run_cell` scores it; separately, with the reason printed,
    when their settings or model cannot batch, or when one member's loss goes non-finite (so the others
    still finish and the failing cell reports its own error). Rows whose PE options turn out not to stack
    (`MembersDiffer`) train as one group per PE instead."""
    phases = phases or CpuPhases()
    if len(cells) == 1:
        return [run_cell(cells[0], work_dir, phases, matmul)]
    torch.set_num_threads(1)
    # the members' tables of rows built from one chosen by this process on: workers running groups of one task's
    # seeds (one group per PE) generate different (task, seed) tables side by side, instead of queueing behind
    # the same table's lock (row_cache.py); a cell's data and result do not depend on the order
    start = os.getpid() % len(cells)
    built: dict[int, CellScoring] = {}
    for i in [*range(start, len(cells)), *range(start)]:
        built[i] = CellScoring(cells[i], work_dir, phases, next(iter(built.values())).splits if built else None,
                               matmul)
    scorings = [built[i] for i in range(len(cells))]
    first = scorings[0]
    ids = [c.cell_id for c in cells]
    reason = why_not_batched(first.cfg) or ("study.keep_checkpoints keeps each cell's own run directory"
                                            if cells[0].study.keep_checkpoints else None)
    # training twins (rows that differ in evaluation-time options only, at one seed) train as one member
    sets = twin_sets([s.cfg for s in scorings])
    if reason is None and len(sets) == 1:
        print(f"training {', '.join(ids)} once: their training is the same (studies/training_twins.py)", flush=True)
        return train_alone(scorings, work_dir, phases)
    lead = [members[0] for members in sets]
    group = None
    if reason is None:
        try:
            group = BatchedGroup([scorings[i].cfg for i in lead], [scorings[i].source for i in lead])
            group.probe()
        except MembersDiffer as e:
            print(f"training {', '.join(ids)} as one group per PE: {e}", flush=True)
            by_pe: dict[str, list[Cell]] = {}
            for c in cells:
                by_pe.setdefault(c.label, []).append(c)
            results = {c.cell_id: r for part in by_pe.values()
                       for c, r in zip(part, run_group(part, work_dir, phases, matmul))}
            return [results[c.cell_id] for c in cells]
        except Exception as e:  # noqa: BLE001 - any failure of the vmapped step means: train these alone
            reason = f"the model does not batch under torch.vmap ({e.__class__.__name__}: {brief_error(e)})"
    if reason is not None:
        print(f"training {', '.join(ids)} separately: {reason}", flush=True)
        return run_separately(cells, work_dir, phases, matmul)
    twins = "" if len(lead) == len(cells) else f" of {len(lead)} members (training twins share one)"
    print(f"training {', '.join(ids)} as one batched model{twins}", flush=True)
    phases.lap("train")

    def score(m: int, step: int, model) -> None:
        for j in sets[m]:
            scorings[j].score_snapshot(step, model)

    try:
        rows = train_group([scorings[i].cfg for i in lead], [scorings[i].source for i in lead], score,
                           [ids[i] for i in lead], group)
    except NonFiniteError as e:
        print(f"batched training stopped ({e}); training {', '.join(ids)} separately", flush=True)
        return run_separately(cells, work_dir, phases, matmul)
    phases.lap("train")
    results: dict[int, CellResult] = {}
    for m, members in enumerate(sets):
        model = group.load_member(m)
        results.update({j: scorings[j].result(model, rows[m]) for j in members})
    return [results[j] for j in range(len(cells))]


def brief_error(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else ""
