"""Reading what is on disk: a study directory (scripts/study.py or the app), eval.py's results.json
(one checkpoint, or a comparison directory with one sub-directory per checkpoint), a sweep's output folder (its
runs' evaluations under eval/<run>/ and its report.md), a training run's metrics.jsonl. Keys are read
defensively: files written by older or newer code still open, and a missing metric shows as n/a instead of
failing the page."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from posbench.app.app_paths import SPEC
from posbench.app.background import read_spec
from posbench.config_loader import from_dict
from posbench.errors import ConfigError, DataError
from posbench.fileio import read_text_bounded
from posbench.studies.cell_result import CellProblem, CellResult, parse_cell
from posbench.studies.study_spec import StudyConfig
from posbench.training.loggers import read_metrics_text


class NotAnOutput(ValueError):
    """A path holds nothing the app can show; the message names the path and what was expected."""


@dataclass
class StudyOutput:
    path: Path
    name: str
    cells: list[CellResult]  # one per finished cell, as the study runner wrote it
    study: StudyConfig | None = None  # its spec when one is kept (app/outputs._spec): summaries use its eval settings


@dataclass
class EvalOutput:
    path: Path
    payloads: list[dict]  # eval.py's results.json, one per checkpoint
    losses: dict[str, list[dict]] = field(default_factory=dict)  # label -> metrics.jsonl rows of its run
    reports: list[Path] = field(default_factory=list)  # a sweep's report.md, shown below its runs


MAX_REPORT_BYTES = 4 << 20  # a sweep's report.md: tables of a few hundred runs, far below this
MAX_CELL_BYTES = 64 << 20  # a finished cell: its scores and its training-loss curve (a few MB at 100k steps)


def read_json(path: Path, limit: int | None = None) -> dict:
    """A JSON object from `path`; NotAnOutput naming the file otherwise. `limit`: the file is one of a run's own
    (a cell), read without following a link and refused past `limit` bytes before it is read."""
    try:
        text = read_text_bounded(path, limit, "a study cell") if limit else Path(path).read_text()
        data = json.loads(text)
    except DataError as e:  # too large: its message names the file
        raise NotAnOutput(str(e)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NotAnOutput(f"{path}: unreadable JSON ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise NotAnOutput(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl rows (a line being written right now, half a line, is skipped)."""
    rows = []
    for line in read_metrics_text(Path(path)).splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_cells(study_dir: Path) -> list[CellResult]:
    """The finished cells of a study, also while it runs (cells/*.json are written atomically), each read by the
    study's own cell reader (studies/cell_result.py): a value that is not a finite number is NotAnOutput naming it."""
    cells_dir = Path(study_dir) / "cells"
    paths = sorted(cells_dir.glob("*.json")) if cells_dir.is_dir() else []
    return [checked_cell(read_json(p, MAX_CELL_BYTES), str(p)) for p in paths]


def checked_cell(data: dict, where: str) -> CellResult:
    try:
        return parse_cell(data)
    except CellProblem as e:
        raise NotAnOutput(f"{where}: {e}; a cell's values are numbers or null (n/a), so this one is not "
                          "shown") from None


def in_study_order(cells: list[CellResult], cell_ids: list[str]) -> list[CellResult]:
    """`cells` in the order of `cell_ids` (the study's grid: tasks, then its rows, then seeds), the order its
    PNGs draw and list them in; a cell the grid does not name goes last."""
    rank = {cid: i for i, cid in enumerate(cell_ids)}
    return sorted(cells, key=lambda c: rank.get(c.cell_id, len(rank)))


def study_checkpoints_note(path: Path) -> str | None:
    """Why a study directory (or one of its cells' work directories) holds no checkpoint to open, and where the
    kept ones are when it has them; None when `path` is not part of a study."""
    path = Path(path)
    study = next((p for p in (path, *path.parents) if (p / "cells").is_dir() or (p / "spec.json").is_file()
                  or (p / "results.json").is_file() and (p / "specs").is_dir()), None)
    if study is None or (study / "checkpoints") in (path, *path.parents):  # a kept one: its own error says why
        return None
    kept = sorted(p.name for p in (study / "checkpoints").iterdir()) if (study / "checkpoints").is_dir() else []
    if kept:
        return (f"{study} is a study: its cells' final checkpoints are in {study / 'checkpoints'} (e.g. "
                f"{study / 'checkpoints' / kept[0]}); give one of those")
    return (f"{study} is a study, and its cells keep no checkpoint: each cell's training run is deleted once it is "
            "scored. Start the study with 'Keep each cell's final checkpoint' (study `keep_checkpoints: true`) to "
            f"keep them in {study / 'checkpoints'}")


def live_losses(study_dir: Path) -> dict[str, list[dict]]:
    """cell id -> training-loss rows of the cells being trained now (the runner's work/<cell>/metrics.jsonl)."""
    work = Path(study_dir) / "work"
    out = {}
    for path in sorted(work.glob("*/metrics.jsonl")) if work.is_dir() else []:
        rows = [{"step": r["step"], "loss": r["loss"]} for r in read_metrics(path) if "loss" in r and "step" in r]
        if rows:
            out[path.parent.name] = rows
    return out


def _eval_payload(path: Path) -> dict | None:
    data = read_json(path)
    return data if isinstance(data.get("suites"), dict) else None


def _run_losses(payload: dict) -> list[dict]:
    ckpt = Path(str(payload.get("checkpoint", "")))
    for run in (ckpt.parent, ckpt):
        if (run / "metrics.jsonl").is_file():
            return [r for r in read_metrics(run / "metrics.jsonl") if "loss" in r and "step" in r]
    return []


def _spec(study_dir: Path) -> StudyConfig | None:
    """The spec of a study (its eval settings make the CIs; its seeds say whether its verdicts are a sequential
    study's looks): the app's own spec.json, else the published form's result/study.json a study run writes
    (studies/published.py); None when there is neither."""
    try:
        if (study_dir / SPEC).is_file():
            return read_spec(study_dir)
        published = study_dir / "result" / "study.json"
        return from_dict(StudyConfig, read_json(published), "study") if published.is_file() else None
    except (ValueError, OSError, ConfigError):  # a damaged spec: the summaries fall back to the default settings
        return None


def open_output(path: str | Path) -> StudyOutput | EvalOutput:
    """Whatever `path` holds: a study, an eval output, an eval comparison, or a training run (loss curves)."""
    p = Path(str(path).strip()).expanduser()
    if not str(path).strip():
        raise NotAnOutput("no path given: enter a study directory, an eval output directory or a results.json")
    if not p.exists():
        raise NotAnOutput(f"{p}: no such file or directory")
    results = p if p.is_file() else p / "results.json"
    if results.is_file():
        data = read_json(results)
        if isinstance(data.get("cells"), list):
            cells = [checked_cell(c, f"{results}: cell {i}") for i, c in enumerate(data["cells"])]
            return StudyOutput(results.parent, str(data.get("study", results.parent.name)), cells,
                               _spec(results.parent))
        if isinstance(data.get("suites"), dict):
            return EvalOutput(results.parent, [data], {data.get("label", "?"): _run_losses(data)})
        raise NotAnOutput(f"{results}: neither a study's results (no `cells`) nor eval.py's (no `suites`)")
    if p.is_dir() and (p / "cells.json").is_file() and (p / "study.json").is_file():  # a published result folder
        result = _published(p)
        return StudyOutput(p, result.name, result.cells, result.study)
    if p.is_dir() and (p / "cells").is_dir():  # a study still running, or stopped before its report
        return StudyOutput(p, p.name, read_cells(p), _spec(p))
    if p.is_dir() and (p / "eval").is_dir() and (runs := _comparison(p / "eval")):  # a sweep (sweeps/evaluate.py)
        report = p / "report.md"
        return EvalOutput(p, runs.payloads, runs.losses, [report] if report.is_file() else [])
    if p.is_dir():
        if comparison := _comparison(p):  # eval.py with several checkpoints: one sub-directory each
            return comparison
        if (p / "metrics.jsonl").is_file():  # a training run: its loss curve
            rows = [r for r in read_metrics(p / "metrics.jsonl") if "loss" in r and "step" in r]
            return EvalOutput(p, [], {p.name: rows})
    raise NotAnOutput(f"{p} is not a study or eval output: expected results.json (from scripts/study.py or "
                      "eval.py), a study directory with cells/, a published result folder (cells.json, study.json), "
                      "an eval comparison directory, a sweep folder with eval/<run>/results.json, or a training run "
                      "with metrics.jsonl")


def _published(folder: Path):
    """A published result (results/<name>/ or a study's result/), read and checked by its own reader."""
    from posbench.studies.published import Result

    try:
        return Result(folder)
    except ConfigError as e:
        raise NotAnOutput(str(e)) from None


def _comparison(p: Path) -> EvalOutput | None:
    """The eval outputs in `p`'s sub-directories (one checkpoint each), None when there is none."""
    payloads = [x for x in (_eval_payload(s / "results.json") for s in sorted(p.iterdir())
                            if (s / "results.json").is_file()) if x]
    return EvalOutput(p, payloads, {x.get("label", "?"): _run_losses(x) for x in payloads}) if payloads else None


def report_text(path: Path) -> str:
    """A sweep's report.md, read without following a link and bounded (NotAnOutput naming it otherwise)."""
    try:
        return read_text_bounded(path, MAX_REPORT_BYTES, "a sweep report")
    except (DataError, OSError) as e:
        raise NotAnOutput(f"{path}: unreadable report ({e})") from None


def merge_eval(outputs: list[EvalOutput]) -> EvalOutput:
    """Several eval outputs side by side (labels made unique by their directory)."""
    payloads, losses = [], {}
    reports = [r for out in outputs for r in out.reports]
    tails = _tails([out.path for out in outputs])
    for out, tail in zip(outputs, tails):
        for payload in out.payloads:
            label = _distinct(payload.get("label", out.path.name), tail, {x.get("label") for x in payloads})
            payloads.append({**payload, "label": label})
        for label, rows in out.losses.items():
            losses[_distinct(label, tail, set(losses))] = rows
    return EvalOutput(outputs[0].path, payloads, losses, reports)


def _tails(paths: list[Path]) -> list[str]:
    """The shortest path tails that tell the outputs apart: `sweep_a/eval/nano_rope_s0` and
    `sweep_b/eval/nano_rope_s0` for two sweeps' evaluations of their `nano_rope_s0`."""
    parts = [Path(p).resolve().parts for p in paths]
    for k in range(1, max(map(len, parts)) + 1):
        tails = ["/".join(p[-k:]) for p in parts]
        if len(set(tails)) == len(tails):
            return tails
    return ["/".join(p) for p in parts]  # the same path twice


def _distinct(label: str, tail: str, taken: set) -> str:
    """`label`, or `label (tail)` when another output already has that label."""
    if label not in taken:
        return label
    candidate, n = f"{label} ({tail})", 2
    while candidate in taken:  # the same output given twice
        candidate, n = f"{label} ({tail}, {n})", n + 1
    return candidate
