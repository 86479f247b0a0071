"""What every gpu_check mode shares: one wall-clock budget, rows that fail alone, tables, JSON under `$OUT`."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch._dynamo


class Budget:
    """A wall-clock budget: `left()` seconds remain of `seconds` since it was made; `part(share)` gives a
    sub-budget of that share of what is left now (never beyond the parent's end)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.start = clock()
        self.end = self.start + seconds

    def left(self) -> float:
        return self.end - self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def part(self, share: float) -> Budget:
        return Budget(max(0.0, self.left() * share), self.clock)

    def allows(self, need_s: float) -> bool:
        return self.left() >= need_s


@dataclass
class Report:
    """Rows of every table, written to `<out>/<name>.json` after each row (a call killed at its time limit
    still returns what it measured), and the tables printed last."""

    name: str
    out: Path | None
    meta: dict = field(default_factory=dict)
    tables: dict[str, list[dict]] = field(default_factory=dict)

    def add(self, table: str, row: dict) -> dict:
        self.tables.setdefault(table, []).append(row)
        self.save()
        return row

    def save(self) -> None:
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.out / f".{self.name}.json.tmp"
        tmp.write_text(json.dumps({"meta": self.meta, "tables": self.tables}, indent=1, default=str))
        os.replace(tmp, self.out / f"{self.name}.json")

    def attempt(self, table: str, key: dict, fn: Callable[[], dict], budget: Budget | None = None,
                need_s: float = 0.0) -> dict:
        """One row: `key` merged with what `fn` returns and its wall time; an exception becomes the row's
        `error` (its last line; the traceback is printed), a budget with less than `need_s` left skips it."""
        if budget is not None and not budget.allows(need_s):
            return self.add(table, {**key, "status": "skipped", "error": f"budget: {budget.left():.0f} s left, "
                                    f"needs ~{need_s:.0f} s"})
        t0 = time.perf_counter()
        print(f"[{self.name}] {table}: {key} ...", flush=True)
        try:
            row = {**key, **fn(), "status": "ok"}
        except Exception as e:  # a row that fails is reported, the call goes on  # noqa: BLE001
            traceback.print_exc()
            row = {**key, "status": "error", "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        if row["status"] == "ok" and row.get("pass") is False:
            row["status"] = "FAIL"
        print(f"[{self.name}] {table}: {row['status']} in {row['wall_s']:.1f} s", flush=True)
        return self.add(table, row)


def fmt(value, spec: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and spec:
        return format(value, spec)
    return str(value)


def markdown_table(title: str, rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A table in markdown, `columns`: (key, header, format spec); a row that did not pass says why after it.
    gpu_check.py prints every mode's tables once, last (the reply of a GPU call carries the end of its output)."""
    lines = [f"## {title}"]
    if not rows:
        lines.append("(no rows)")
    else:
        cells = [[h for _, h, _ in columns]] + [[fmt(r.get(k), spec) for k, _, spec in columns] for r in rows]
        widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
        lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)) + " |" for cell in cells[:1]]
        lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        for cell, r in zip(cells[1:], rows, strict=True):
            line = "| " + " | ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)) + " |"
            if r.get("status") not in (None, "ok"):
                line += f"  {r['status']}: {r.get('error', '')}"
            lines.append(line)
    return "\n".join(lines)


def environment(device: torch.device) -> dict:
    """What ran the check: versions and the card, for the JSON and the table headers."""
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": str(device),
           "cuda": torch.version.cuda, "host_cpus": os.cpu_count()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(gpu=p.name, gpu_mem_gb=round(p.total_memory / 1e9, 1), sms=p.multi_processor_count,
                   capability=f"{p.major}.{p.minor}")
        try:
            import triton
            env["triton"] = triton.__version__
        except ImportError:
            env["triton"] = None
    return env


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, repeats: int = 10) -> float:
    """Measured FLOP/s of an n x n x n product in `dtype` on `device` (median of `repeats` after 3 warm-ups)."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    times = []
    for i in range(repeats + 3):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times)


def out_dir(arg: str) -> Path | None:
    """--out, else $OUT (set on the GPU machine), else nowhere."""
    chosen = arg or os.environ.get("OUT", "")
    return Path(chosen) if chosen else None


@dataclass
class ModeResult:
    """A mode's printed tables (markdown) and how many of its rows failed or broke their tolerance."""

    tables: list[str]
    failed: int


def failed_rows(report: Report) -> int:
    return sum(r.get("status") in ("error", "FAIL") for rows in report.tables.values() for r in rows)


def allow_recompiles(limit: int = 64) -> None:
    """Let one compiled function (flex attention, compiled once per process with static shapes) recompile for every
    evaluation length and batch shape a check runs (8 by default; past it dynamo would fall back to eager flex
    attention, which builds the whole score matrix)."""
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(limit, getattr(torch._dynamo.config, name)))


def fresh_compile() -> None:
    """Forget dynamo's compiled frames before a new model is compiled: each model's forward adds guards to the same
    code object, and past dynamo's recompile limit (8) it would run the rest uncompiled, silently. Inductor's
    caches on disk stay, so a graph compiled before (the same PE and shape) is read back, not rebuilt."""
    torch._dynamo.reset()


def logged_rows(run_dir: str | Path, key: str) -> list[dict]:
    """The rows of a training run's metrics.jsonl that hold `key` (tokens_per_s: log rows; loss: step rows)."""
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [row for row in (json.loads(line) for line in lines if line) if key in row]
