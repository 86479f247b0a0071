"""metrics.jsonl after a resume holds each step once: the rows logged after the resumed checkpoint's step (the
steps that run again) are dropped first, a torn last line with them."""

import json
from pathlib import Path

from posbench.training.batch_sources import RandomTokens
from posbench.training.loggers import drop_rows_after
from posbench.training.loop import train
from tests.training.helpers import nano_config

SOURCE = RandomTokens(512, 64)


def steps(run_dir) -> list[tuple[int, str]]:
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], "val" if "val_loss" in r else "train") for r in rows]


def test_resuming_an_earlier_checkpoint_logs_each_step_once(tmp_path, capsys):
    cfg = ["train.run_name=r", "train.target_budgets=[4096]", "train.ckpt_interval=4", "train.eval_interval=4"]
    first = train(nano_config(tmp_path, *cfg), SOURCE)
    run = Path(first["run_dir"])
    logged = steps(run)
    assert logged == sorted(set(logged)) and max(s for s, _ in logged) == 8
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 9, "tok')  # a crash mid-write
    again = train(nano_config(tmp_path, *cfg, f"train.resume={run / 'step_00000004'}"), SOURCE)
    assert again["step"] == 8
    assert steps(run) == logged  # steps 5..8 once, the torn line gone
    assert "dropped 6 rows of" in capsys.readouterr().err  # train rows 5..8, the val row of 8, the torn line


def test_drop_rows_after_keeps_what_came_before(tmp_path):
    jsonl = tmp_path / "metrics.jsonl"
    assert drop_rows_after(jsonl, 3) == 0 and not jsonl.exists()
    jsonl.write_text("".join(json.dumps({"step": s, "tokens": 512 * s}) + "\n" for s in range(1, 7)))
    assert drop_rows_after(jsonl, 3) == 3
    assert [json.loads(x)["step"] for x in jsonl.read_text().splitlines()] == [1, 2, 3]
    assert drop_rows_after(jsonl, 3) == 0
