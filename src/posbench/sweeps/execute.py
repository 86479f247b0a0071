"""Run a sweep's trainings on this machine, one after another or `workers` at a time, resumably.

A finished run leaves `<out>/done/<run>.json` (written atomically after its final checkpoint), so a
re-run skips it; a killed run has no marker and continues from its latest valid checkpoint through the
trainer's own `--resume auto` (bit-identical to an uninterrupted run). Every run's data is checked before
the first one starts: shards of another tokenizer or task mix stop the sweep naming both fingerprints.
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

from posbench.data.layout import DataLayout
from posbench.errors import DataError, user_paths
from posbench.fileio import write_json
from posbench.grid.cells import CELL_KINDS, GridCell
from posbench.procpool import run_jobs
from posbench.sweeps.sweep_spec import Run
from posbench.training.device import pick_device
from posbench.training.plan import make_plan


def done_path(out_dir: Path, run: Run) -> Path:
    return out_dir / "done" / f"{run.name}.json"


def is_done(out_dir: Path, run: Run) -> bool:
    return done_path(out_dir, run).is_file()


@CELL_KINDS.register("pretrain")
class PretrainCell(GridCell):
    """A sweep's pretraining run (grid/cells.py): done when `<out>/done/<run>.json` holds its training summary. A
    branch run continues its main run's branch checkpoint, so it runs after that run (its chain, `chains`)."""

    item: Run
    unit = "runs"

    @property
    def cell_id(self) -> str:
        return self.item.name

    def is_done(self, out_dir: Path) -> bool:
        return is_done(out_dir, self.item)

    def run(self, out_dir: Path, log=print) -> None:
        from posbench.training.batch_sources import build_stream
        from posbench.training.loop import train

        log(f"sweep: training {self.item.name}")
        summary = train(self.item.cfg, build_stream(self.item.cfg))
        if summary.get("stopped"):  # a signal or max_steps: not finished, resume next time
            raise KeyboardInterrupt(f"{self.item.name} stopped at step {summary['step']}; re-run to continue")
        write_json(done_path(out_dir, self.item), summary)
        if summary["late_signal"] is not None:  # Ctrl-C during the final checkpoint: this run is done, stop here
            raise KeyboardInterrupt(f"{self.item.name} finished; stopped by a signal after its last step")

    def read(self, out_dir: Path) -> dict:
        return json.loads(done_path(out_dir, self.item).read_text())

    def on_cpu(self) -> bool:
        device = self.item.cfg.train.device
        return device != "cuda" and pick_device(device, "") == "cpu"

    @classmethod
    def train_flop(cls, todo: list[PretrainCell]) -> float:
        """A main run trains its whole budget; a branch run only its cooldown, from the main run's decay start for
        its budget (where the branch checkpoint is) to its budget. That start is the branch's own schedule's
        `decay_start`: both plans make that budget's schedule from the same settings (training/plan.make_plan)."""
        flop = 0.0
        for cell in todo:
            plan = make_plan(cell.item.cfg, 1, "cpu")  # on the meta device: no model is built
            start = plan.schedule.decay_start if cell.item.parent else 0
            flop += 6.0 * plan.n_params * (plan.end_tokens - start)
        return flop


def prepare_data(runs: list[Run], log=print) -> None:
    """Tokenize each distinct data section of the sweep's runs (with its task mix; resumable, files already
    done are skipped), then print what the shards hold: the shares are measured from the shards."""
    from posbench.config_loader import to_dict
    from posbench.data.info import describe
    from posbench.data.tokenize_shards import tokenize
    from posbench.training.batch_sources import check_data_positions

    for run in runs:  # every run's PE can read its data's ids, before any file is tokenized
        check_data_positions(run.cfg)
    seen = []
    for run in runs:
        if run.cfg.train.stream != "shards" or to_dict(run.cfg.data) in seen:
            continue
        seen.append(to_dict(run.cfg.data))
        tokenize(run.cfg.data, log=log)
        log(describe(run.cfg.data))


def check_data(runs: list[Run]) -> None:
    """Each run's shards exist for its tokenizer and task mix; else name what is there instead."""
    for cfg in {id(r.cfg.data): r.cfg for r in runs if r.cfg.train.stream == "shards"}.values():
        layout = DataLayout.from_config(cfg.data)
        if (layout.tokens_dir / "manifest.json").is_file():
            continue
        wanted = layout.tokens_dir.name
        siblings = sorted(p.name for p in layout.tokens_dir.parent.glob("*") if (p / "manifest.json").is_file())
        found = (f"; shards there were made with: {', '.join(siblings)} (tokenizer[_mix-fingerprint])"
                 if siblings else "")
        raise DataError(f"no token shards for this sweep's data: it trains on {wanted} (tokenizer "
                        f"`{layout.tokenizer.cfg.tag()}`, task mix `{layout.mix_tag or 'none'}`) in "
                        f"{layout.tokens_dir.parent}{found}. Tokenize with the sweep's data settings first: "
                        "python -m posbench.data.prepare_fineweb tokenize SWEEP_DATA.yaml, or fix run.data")


def chains(runs: list[Run]) -> list[list[Run]]:
    """Each main run followed by its branch runs, which start from its branch checkpoints."""
    by_main: dict[str, list[Run]] = {}
    for run in runs:
        by_main.setdefault(run.parent or run.name, []).append(run)
    return list(by_main.values())


def train_chain(chain: list[Run], out_dir: Path, log=print) -> list[str]:
    """Train the unfinished runs of one chain in order; returns the names trained now."""
    ran = []
    for cell in map(PretrainCell, chain):
        if cell.is_done(out_dir):
            continue
        cell.run(out_dir, log)
        ran.append(cell.cell_id)
    return ran


def run_all(runs: list[Run], out_dir: Path, progress: bool = True, log=print, workers: int = 1,
            todo: list[Run] | None = None) -> None:
    """Train the unfinished runs (`todo`, in its order: the grid's, grid/cells.pending; None: every unfinished run
    in the plan's order), `workers` chains at a time (output then in `<out>/logs/<run>.log`)."""
    check_data(runs)
    with user_paths():  # --out is the user's: a file in its way, no permission to write there
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    todo = chains([r for r in runs if not is_done(out_dir, r)] if todo is None else todo)
    workers = min(workers, max(1, len(todo)))
    with tqdm(total=len(runs), initial=sum(is_done(out_dir, r) for r in runs), desc="sweep runs", unit="run",
              disable=not progress) as bar:
        if workers == 1:
            for chain in todo:
                bar.set_postfix_str(chain[0].name)
                bar.update(len(train_chain(chain, out_dir, log)))
            return
        log(f"sweep: {len(todo)} runs (with their branches) in {workers} processes; logs in {out_dir / 'logs'}")
        jobs = {c[0].parent or c[0].name: (c, out_dir) for c in todo}  # named by the chain's main run
        failures = run_jobs(train_chain, jobs, workers, out_dir / "logs",
                            on_done=lambda _: bar.update(sum(is_done(out_dir, r) for r in runs) - bar.n))
    if failures:
        raise RuntimeError(f"{len(failures)} sweep runs failed; re-run to resume them:\n" + "\n".join(failures))
