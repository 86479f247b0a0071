"""A study's result as data, and its page rendered from that data alone.

Every study run writes `<out>/result/`, the form a published result is kept in under `results/<name>/`:

    cells.json   every cell's result (studies/cell_result.py, its schema version in each) with the attention maps
                 left out (null: they are figures of one example, 90% of a cell's bytes)
    study.json   the study's spec, as `StudyConfig` loads it
    run.json     the command, posbench's commit, the machine (CPU model and vector flags, or GPU), wall and CPU time,
                 and an optional `note` a publisher adds (how busy the machine was)
    timings.json optional, added by a publisher: other measured runs of the same command (machine, wall, CPU time,
                 conditions, who measured), which README's timing table lists beside run.json's own

Publishing a result is: run, copy `<out>/result/` to `results/<name>/`, then `posbench results render <name>`,
which writes `docs/results/<name>.md` (tables and verdicts through the study report's own judges), its figure
under `docs/results/<name>/` and `docs/results/index.md`. tests/docs/test_results_pages.py renders every page
again and fails when a number, interval or verdict in a page is not what the data gives.
"""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import replace
from pathlib import Path

from posbench.config_loader import from_dict, to_dict
from posbench.errors import ConfigError
from posbench.fileio import write_text
from posbench.procpool import usable_cores
from posbench.studies import sequential
from posbench.studies.cell_result import CellProblem, CellResult, parse_cell
from posbench.studies.claims import DEFAULT_MARGINS
from posbench.studies.long_context_report import grids_from_cells, long_context_section
from posbench.studies.study_plots import id_ood_bars
from posbench.studies.study_report import (
    by_group,
    claims_part,
    comparisons,
    judged_pairs,
    looks,
    seed_calibration,
    seeds_label,
    seeds_text,
    summarize,
    summary_table,
)
from posbench.studies.study_spec import StudyConfig

FILES = ("cells.json", "study.json", "run.json")
FIGURE = "id_ood_bars.png"
HEADLINE_METRIC = "ood_beyond_acc"
REPO = Path(__file__).resolve().parents[3]  # a checkout's root (the commit a run records, when it is one)


def cpu_description() -> dict:
    """The CPU a run measured on: its model name and the vector flags that decide BLAS paths (AVX2, AVX-512)."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = sorted({f for f in value.split() if f in ("avx2", "avx512f", "amx_tile")})
                break
    except OSError:  # not Linux: the platform's processor name only
        pass
    return {"cpu": model, "flags": flags, "cores": usable_cores()}


def commit() -> str:
    """posbench's git commit when it runs from a checkout, else "unknown" (an installed wheel)."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def write_result(out_dir: Path, results: list[CellResult], study: StudyConfig, command: str, wall_s: float,
                 cpu_s: float, device: str = "cpu") -> Path:
    """`<out_dir>/result/`: the study's per-seed values, spec and run record (see the module docstring)."""
    folder = Path(out_dir) / "result"
    cells = [replace(r, attention=None).to_data() for r in results]  # the grid's order: the tables'

    run = {"command": command, "commit": commit(), "machine": {**cpu_description(), "device": device},
           "wall_s": round(wall_s, 1), "cpu_s": round(cpu_s, 1)}
    write_text(folder / "cells.json", json.dumps(cells, indent=0, sort_keys=True) + "\n")
    write_text(folder / "study.json", json.dumps(to_dict(study), indent=1, sort_keys=True, default=str) + "\n")
    write_text(folder / "run.json", json.dumps(run, indent=1, sort_keys=True) + "\n")
    return folder


class Result:
    """One published result folder, read and checked: a missing or malformed file is a ConfigError naming it."""

    def __init__(self, folder: Path):
        self.folder, self.name = Path(folder), Path(folder).name
        missing = [f for f in FILES if not (self.folder / f).is_file()]
        if missing:
            raise ConfigError(f"{self.folder} is not a result folder: {', '.join(missing)} missing (a study run "
                              "writes all three under <out>/result/)")
        try:
            cells = json.loads((self.folder / "cells.json").read_text())
            self.study = from_dict(StudyConfig, json.loads((self.folder / "study.json").read_text()), "study")
            self.run = json.loads((self.folder / "run.json").read_text())
        except ValueError as e:
            raise ConfigError(f"{self.folder}: not a readable result ({e})") from None
        if not isinstance(cells, list):
            raise ConfigError(f"{self.folder / 'cells.json'}: not a list of cell results")
        self.cells: list[CellResult] = []
        for i, data in enumerate(cells):
            try:
                self.cells.append(parse_cell(data))
            except CellProblem as e:
                raise ConfigError(f"{self.folder / 'cells.json'}: cell {i} is not a cell's result ({e})") from None
        # the report's judges count the seeds the data has, whatever the spec listed
        self.study.seeds = sorted({c.seed for c in self.cells})
        # a sequential study's verdicts are its looks' (at the boundary), replayed from the cells as its report did
        self.looks = looks(self.cells, self.study)

    def question(self) -> str:
        pes = ", ".join(dict.fromkeys(c.pe for c in self.cells))
        tasks = ", ".join(dict.fromkeys(c.task for c in self.cells))
        return f"How do {pes} compare in and beyond the training length on {tasks}?"

    def setting(self) -> str:
        s, m = self.study, self.run["machine"]
        flags = "/".join(f.upper().replace("AVX512F", "AVX-512") for f in m.get("flags", []))
        where = m["device"] if m.get("device", "cpu") != "cpu" else f"{m['cpu']} ({flags}), {m['cores']} cores"
        note = f" ({self.run['note']})" if self.run.get("note") else ""  # e.g. how busy the machine was
        return (f"{len(self.cells)} cells, {seeds_text(s, self.cells)}, {s.train.steps} steps; {where}; "
                f"{self.run['wall_s'] / 60:.1f} min wall, {self.run['cpu_s']:,.0f} CPU-s{note}")

    def verdicts(self) -> list[dict]:
        """Per task: the best PE beyond the training length and how the Holm-adjusted pairs came out."""
        out = []
        for (task, axes), per_pe in by_group(self.cells, HEADLINE_METRIC).items():
            pairs = judged_pairs(per_pe, task, axes, self.study, HEADLINE_METRIC, self.looks)
            means = {pe: sum(v.values()) / len(v) for pe, v in per_pe.items()}
            best = max(means, key=means.get)
            above = [p for p in pairs if (p.verdict == ">" and p.a == best) or (p.verdict == "<" and p.b == best)]
            out.append({"task": task, "best": best, "mean": means[best], "above": len(above), "others": len(per_pe) - 1,
                        "ordered": sum(p.verdict in "<>" for p in pairs), "same": sum(p.verdict == "~" for p in pairs),
                        "open": sum(p.verdict == "?" for p in pairs), "pairs": len(pairs)})
        return out


def headline_table(result: Result) -> str:
    """The README's table: per task, the best PE beyond the training length and what the judges decide."""
    lines = ["| task | best PE beyond the training length | shown above | PE pairs: ordered / same / undecided |",
             "|---|---|---|---|"]
    for v in result.verdicts():
        lines.append(f"| {v['task']} | {v['best']} ({100 * v['mean']:.1f}%) | {v['above']} of {v['others']} others | "
                     f"{v['ordered']} / {v['same']} / {v['open']} of {v['pairs']} |")
    return "\n".join(lines)


def page(result: Result) -> str:
    s, run = result.study, result.run
    pct = int(100 * s.eval.confidence)
    rule = "" if result.looks is None else f", read at the sequential boundary ({result.looks.boundary.describe()})"
    return "\n".join([
        f"# Result `{result.name}`", "",
        f"**Question.** {result.question()}", "",
        f"**Setting.** {result.setting()}. Command: `{run['command']}` at commit `{run['commit'][:12]}`.", "",
        "Rendered by `posbench results render` from `results/" + result.name + "/` alone: per-seed values "
        "(cells.json), the spec (study.json) and the run record (run.json). [Reading a report](../reading-a-report.md) "
        "explains every column and verdict word.", "",
        f"![accuracy in and beyond the training length]({result.name}/{FIGURE})", "",
        "## Verdicts beyond the training length", "",
        headline_table(result), "",
        f"Per task, every pair of PEs: a paired t test over seeds ({pct}%), Holm-adjusted over the task's pairs"
        f"{rule}; \"same\" is within +-{100 * DEFAULT_MARGINS[HEADLINE_METRIC]:g} points by two one-sided tests.", "",
        comparisons(result.cells, s, rep=result.looks), "",
        *([] if result.looks is None else sequential.section(result.looks, s)),
        f"## Summary ({seeds_label(s)})", "",
        summary_table(summarize(result.cells, s), s), "",
        "## How many seeds separate the top two PEs", "",
        seed_calibration(result.cells, s), "",
        # a study with a length grid (long_context): its families, effective lengths and per-row claims, as the
        # study's own report prints them; nothing for a study without one
        *long_context_section(grids_from_cells(result.cells, s.eval.length_grid.keep), s.eval.confidence,
                              s.eval.n_boot),
        *(claims_part(result.cells, s, result.looks) if s.claims else [])])


def headline_sentences(result: Result) -> str:
    """The README's two lines under the headline table, in words, from the same verdicts."""
    ordered, same = {}, []
    for v in result.verdicts():
        if v["same"] == v["pairs"]:
            same.append(v["task"])
        elif v["above"]:
            ordered.setdefault((v["best"], v["above"], v["others"]), []).append(v["task"])
    lines = [f"The judges order {best} above {f'all {others}' if above == others else f'{above} of the {others}'} "
             f"other PEs on {' and '.join(tasks)}." for (best, above, others), tasks in ordered.items()]
    lines += [f"On {task} the judges call every PE the same (within +-{100 * DEFAULT_MARGINS[HEADLINE_METRIC]:g} "
              "points beyond the training length)." for task in same]
    return "\n".join(lines)


TIMING_KEYS = ("cpu", "flags", "cores", "wall_s", "cpu_s", "conditions", "measured_by")


def timings(result: Result) -> list[dict]:
    """run.json's own run first, then timings.json's (each checked: a missing key is a ConfigError naming it)."""
    m = result.run["machine"]
    rows = [{"cpu": m["cpu"], "flags": m.get("flags", []), "cores": m["cores"], "wall_s": result.run["wall_s"],
             "cpu_s": result.run["cpu_s"], "conditions": result.run.get("note", ""),
             "measured_by": f"this result's run (commit {result.run['commit'][:12]})"}]
    path = result.folder / "timings.json"
    extra = json.loads(path.read_text()) if path.is_file() else []
    for i, row in enumerate(extra):
        missing = [k for k in TIMING_KEYS if k not in row]
        if missing:
            raise ConfigError(f"{path}: run {i} lacks {', '.join(missing)} (each run needs {', '.join(TIMING_KEYS)})")
    return rows + [{k: row[k] for k in TIMING_KEYS} for row in extra]


def timings_table(result: Result) -> str:
    """README's table of measured wall and CPU times of the result's command, one row per measured run."""
    lines = ["| CPU | cores | wall | CPU time | conditions | measured by |", "|---|---|---|---|---|---|"]
    for t in timings(result):
        flags = "/".join(f.upper().replace("AVX512F", "AVX-512") for f in t["flags"])
        minutes, seconds = divmod(round(t["wall_s"]), 60)
        lines.append(f"| {t['cpu']} ({flags}) | {t['cores']} | {minutes} min {seconds} s | {t['cpu_s']:,.0f} s | "
                     f"{t['conditions']} | {t['measured_by']} |")
    return "\n".join(lines)


# README's generated blocks, `<!-- results: <name> <block> -->` ... `<!-- /results -->`, by block
README_BLOCKS = {"headline": lambda r: headline_table(r) + "\n\n" + headline_sentences(r), "timings": timings_table}


def index(results: list[Result]) -> str:
    lines = ["# Results", "",
             "One line per published result: its question, its setting, its verdict, and its page. Each page is "
             "rendered from the data under `results/<name>/` by `posbench results render`; "
             "[Writing a study](../writing-a-study.md) says how to add one.", "",
             "| result | question | setting | verdict (best PE beyond the training length, per task) |",
             "|---|---|---|---|"]
    for r in results:
        verdict = "; ".join(f"{v['task']}: " + ("all the same" if v["same"] == v["pairs"] else
                                                  f"{v['best']} above {v['above']} of {v['others']}")
                            for v in r.verdicts())
        lines.append(f"| [{r.name}]({r.name}.md) | {r.question()} | {r.setting()} | {verdict} |")
    return "\n".join(lines) + "\n"


def render(result: Result, docs: Path, figures: bool = True) -> dict[Path, str]:
    """The page's text by path (written by the caller), and with `figures` the headline figure written now."""
    if figures:
        (docs / result.name).mkdir(parents=True, exist_ok=True)
        id_ood_bars(result.cells, docs / result.name, result.study.eval.confidence)
    return {docs / f"{result.name}.md": page(result) + "\n"}


def published(root: Path) -> list[Result]:
    """Every result folder under `root` (results/), by name."""
    return [Result(p) for p in sorted(Path(root).iterdir()) if p.is_dir()]
