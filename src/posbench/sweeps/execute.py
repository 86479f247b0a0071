"""Run a sweep's trainings one after another on this machine, resumably.

A finished run leaves `<out>/done/<run>.json` (written atomically after its final checkpoint), so a
re-run skips it; a killed run has no marker and continues from its latest valid checkpoint through the
trainer's own `--resume auto` (bit-identical to an uninterrupted run). Every run's data is checked before
the first one starts: shards of another tokenizer or task mix stop the sweep naming both fingerprints.
"""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from posbench.data.atomic import write_json
from posbench.data.errors import DataError
from posbench.data.layout import DataLayout
from posbench.sweeps.spec import Run


def done_path(out_dir: Path, run: Run) -> Path:
    return out_dir / "done" / f"{run.name}.json"


def is_done(out_dir: Path, run: Run) -> bool:
    return done_path(out_dir, run).is_file()


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


def run_all(runs: list[Run], out_dir: Path, progress: bool = True, log=print) -> list[str]:
    """Train every unfinished run; returns the names trained now."""
    from posbench.cli import build_stream
    from posbench.training.loop import train

    check_data(runs)
    todo = [r for r in runs if not is_done(out_dir, r)]
    ran = []
    with tqdm(total=len(runs), initial=len(runs) - len(todo), desc="sweep runs", unit="run",
              disable=not progress) as bar:
        for run in todo:
            bar.set_postfix_str(run.name)
            log(f"sweep: training {run.name}")
            summary = train(run.cfg, build_stream(run.cfg))
            if summary.get("stopped"):  # a signal or max_steps: not finished, resume next time
                raise KeyboardInterrupt(f"{run.name} stopped at step {summary['step']}; re-run to continue")
            write_json(done_path(out_dir, run), summary)
            ran.append(run.name)
            bar.update()
    return ran
