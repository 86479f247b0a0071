"""One comparison for a whole sweep: report.md, results.csv (every number), throughput.md.

Rows are run groups (size, budget, `vary` axes), columns or sub-rows the PEs; every figure is the mean over
seeds with a Student t-interval (posbench/stats.py, deterministic), n/a where a PE cannot represent the
length. report.md and results.csv hold no wall-clock figures, so an interrupted and resumed sweep writes
them byte-identical to an uninterrupted one; tokens/s and MFU go to throughput.md.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from posbench.evaluation import protocol as run_protocol
from posbench.fileio import atomic_open
from posbench.stats import DEFAULT_METHOD, Summary, interval, interval_label
from posbench.studies import long_context_report, protocol, sequential
from posbench.studies.claims import report_section
from posbench.sweeps.sweep_spec import Run, SweepConfig
from posbench.training.loggers import read_metrics_text


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def metrics_rows(run: Run) -> list[dict]:
    path = Path(run.cfg.train.out_dir) / run.name / "metrics.jsonl"
    return [json.loads(line) for line in read_metrics_text(path).splitlines() if line.strip()] if path.is_file() else []


def last(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(vals[-1]) if vals else None


def median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(np.median(vals)) if vals else None


class Table:
    """values[(group, pe, column)] = list over seeds; formatted as mean [CI]."""

    def __init__(self, sweep: SweepConfig, bounds: tuple[float, float] | None = None):
        self.sweep = sweep
        self.bounds = bounds  # what the values cannot leave (accuracies: [0, 1]); intervals are clipped to it
        self.values: dict[tuple, list] = defaultdict(list)
        self.by_seed: dict[tuple, dict] = defaultdict(dict)  # the same values keyed by seed, for paired claims
        self.columns: list[str] = []

    def add(self, group: str, pe: str, column: str, value, seed: int | None = None) -> None:
        if column not in self.columns:
            self.columns.append(column)
        self.values[(group, pe, column)].append(value)
        if seed is not None:
            self.by_seed[(group, pe, column)][seed] = value

    def summary(self, group: str, pe: str, column: str) -> Summary:
        return interval(self.values.get((group, pe, column), []), self.sweep.confidence,
                        n_boot=self.sweep.n_boot, bounds=self.bounds)

    def markdown(self, groups: list[str], pes: list[str], pct: bool) -> str:
        rows = []
        for g in groups:
            for pe in pes:
                if any((g, pe, c) in self.values for c in self.columns):
                    rows.append([g, pe, *(self.summary(g, pe, c).fmt(pct) for c in self.columns)])
        return md_table(["runs", "PE", *self.columns], rows)


def _ppl(results: dict) -> dict[int, float | None]:
    rows = results["suites"].get("ppl", {}).get("rows", [])
    return {r["length"]: (r["nonoverlap"]["ppl"] if r.get("na") is None else None) for r in rows}


def ppl_slope(ppl: dict[int, float | None], train_len: int) -> float | None:
    """Least-squares slope of perplexity against log2(length / training length) over the lengths from the
    training length on: perplexity gained per doubling of the context past training (ALiBi's claim: ~0;
    sinusoidal and RoPE: > 0). None with fewer than two such lengths, or when any of them is n/a."""
    points = {L: v for L, v in ppl.items() if L >= train_len}
    if len(points) < 2 or any(v is None for v in points.values()):
        return None
    x = np.log2(np.array(sorted(points), dtype=np.float64) / train_len)
    y = np.array([points[L] for L in sorted(points)], dtype=np.float64)
    return float(np.polyfit(x, y, 1)[0])


SLOPE = "ppl per doubling past the training length"
FIRST_TOKEN = "first-token attention mass at the training length"
# a sweep claim's metric -> (table, column); sweep_spec.SWEEP_CLAIM_METRICS lists the same names
CLAIM_TABLES = {"ppl_slope": ("slope", SLOPE), "first_token_mass": ("first_token_train", FIRST_TOKEN)}


def ppl_tokens_line(runs: list[Run], results: dict[str, dict]) -> str:
    """The tokens each length's perplexity was scored over (non-overlapping windows), so a figure is compared
    with another (eval.py's, a paper's) only at the same count."""
    counts: dict[int, set[int]] = defaultdict(set)
    for run in runs:
        for r in results.get(run.name, {"suites": {}})["suites"].get("ppl", {}).get("rows", []):
            if r.get("na") is None and r.get("nonoverlap"):
                counts[r["length"]].add(r["nonoverlap"]["tokens"])
    if not counts:
        return ""
    return " Tokens scored per length: " + ", ".join(
        f"{L}: {' / '.join(f'{n:,}' for n in sorted(ns))}" for L, ns in sorted(counts.items())) + "."


def _first_token(results: dict) -> dict[int, float | None]:
    rows = results["suites"].get("first_token", {}).get("rows", [])
    return {r["length"]: r["mean"] for r in rows}


def _algorithmic(results: dict) -> list[dict]:
    return results["suites"].get("algorithmic", {}).get("cells", [])


def _retrieval(results: dict, suite: str) -> dict[int, float | None]:
    """Accuracy per length, averaged over depths (n/a when any depth is n/a at that length)."""
    by = results["suites"].get(suite, {}).get("cells", [])
    out: dict[int, list] = defaultdict(list)
    for c in by:
        out[c["length"]].append(c["accuracy"])
    return {k: (None if any(v is None for v in vs) else float(np.mean(vs))) for k, vs in sorted(out.items())}


def build_tables(sweep: SweepConfig, runs: list[Run], results: dict[str, dict]) -> dict[str, Table]:
    positive, unit = (0.0, float("inf")), (0.0, 1.0)
    t = {k: Table(sweep, b) for k, b in (("loss", positive), ("ppl", positive), ("slope", None), ("algorithmic", unit),
                                        ("passkey", unit), ("niah", unit), ("long_context", positive),
                                        ("first_token", unit), ("first_token_train", unit))}
    for run in runs:
        res = results.get(run.name)
        rows = metrics_rows(run)
        t["loss"].add(run.group, run.pe, "train loss (final)", last(rows, "loss"))
        t["loss"].add(run.group, run.pe, "val loss (last)", last(rows, "val_loss"))
        if res is None:
            continue
        for length, ppl in _ppl(res).items():
            t["ppl"].add(run.group, run.pe, f"{length}", ppl)
        if _ppl(res):
            t["slope"].add(run.group, run.pe, SLOPE, ppl_slope(_ppl(res), run.cfg.model.seq_len), run.seed)
        for length, mass in _first_token(res).items():
            t["first_token"].add(run.group, run.pe, f"{length}", mass)
            if length == run.cfg.model.seq_len:
                t["first_token_train"].add(run.group, run.pe, FIRST_TOKEN, mass, run.seed)
        for c in _algorithmic(res):
            split = "ID" if c["split"] == "id" else "OOD"
            t["algorithmic"].add(run.group, run.pe, f"{c['task']} {split} {c['shots']}-shot", c["accuracy"])
            if c.get("n_beyond"):  # answer tokens predicted past the training length: extrapolation on its own
                t["algorithmic"].add(run.group, run.pe, f"{c['task']} {split} {c['shots']}-shot beyond train length",
                                     c["beyond_accuracy"])
        for suite in ("passkey", "niah"):
            for length, acc in _retrieval(res, suite).items():
                t[suite].add(run.group, run.pe, f"{length}", acc)
        lc = long_context_report.suite_of(res)  # effective lengths per seed, for results.csv (report: its section)
        for family, fam in ({**lc["families"], long_context_report.MEAN: lc["mean"]} if lc else {}).items():
            t["long_context"].add(run.group, run.pe, f"{family} effective length", fam["effective"]["length"], run.seed)
    return t


def chance_line(runs: list[Run], results: dict[str, dict]) -> str:
    """Exact match of whole answers by uniform guessing, per task and split, as the table measures (mean over the
    examples; results written before it existed give the per-token chance, labelled so)."""
    whole: dict[str, dict[str, float]] = {}
    per_token: dict[str, float] = {}
    for run in runs:
        for c in _algorithmic(results.get(run.name, {"suites": {}})):
            if c.get("chance_whole_answer") is not None:
                whole.setdefault(c["task"], {})["ID" if c["split"] == "id" else "OOD"] = c["chance_whole_answer"]
            else:
                per_token[c["task"]] = c["chance_per_token"]
    parts = [f"{task} " + " / ".join(f"{splits[k]:.1%} {k}" for k in ("ID", "OOD") if k in splits)
             for task, splits in sorted(whole.items())]
    parts += [f"{task} {v:.0%} per token" for task, v in sorted(per_token.items()) if task not in whole]
    return ", ".join(parts)


def commonest_answer_line(runs: list[Run], results: dict[str, dict]) -> str:
    """What always giving the commonest answer of each (task, split) scores: the evaluation examples are the
    same for every run, and a finite set of a balanced yes/no task is rarely split exactly in half."""
    best: dict[str, dict[str, float]] = {}
    for run in runs:
        for c in _algorithmic(results.get(run.name, {"suites": {}})):
            if c.get("most_common_answer_accuracy") is not None:  # absent from results written before it existed
                best.setdefault(c["task"], {})["ID" if c["split"] == "id" else "OOD"] = c["most_common_answer_accuracy"]
    def both(splits: dict[str, float]) -> str:
        return " / ".join(f"{splits[split]:.1%} {split}" for split in ("ID", "OOD") if split in splits)
    return ", ".join(f"{task} {both(splits)}" for task, splits in sorted(best.items()))


def _data_text(cfg) -> str:
    """What one run read: its shards (source, tokenizer, task mix), or the random tokens `train.stream=random`
    gives, whose data config is never read and so is not described."""
    if cfg.train.stream == "random":
        return (f"uniform random tokens (`train.stream=random`: nothing to learn; no source, tokenizer or task mix is "
                f"read), vocabulary {cfg.model.vocab_size}; training length {cfg.model.seq_len} tokens")
    mix = cfg.data.mix
    return (f"`{cfg.data.source.name}` source, tokenizer `{cfg.data.tokenizer.tag()}`, task mix "
            + (f"{mix.ratio:.0%} of train {mix.unit} ({', '.join(t.name for t in mix.tasks)})"
               if mix.active else "none")
            + f"; training length {cfg.model.seq_len} tokens")


def data_line(runs: list[Run]) -> str:
    """The report's sentence on the data: one description when every run read the same kind of data, else one per
    run group (a `vary` of train.stream or data.*)."""
    by_group = {r.group: _data_text(r.cfg) for r in runs}
    if len(set(by_group.values())) == 1:
        return f"Data: {next(iter(by_group.values()))}."
    return "Data (differs by run group): " + "; ".join(f"{g}: {text}" for g, text in by_group.items()) + "."


def seeds_text(sweep: SweepConfig, rep: sequential.Replay | None) -> str:
    """ "seeds 0, 1", or for sequential seeds "sequential seeds 3:10:1 (start:max:step; 3-5 per row, ...)"."""
    if rep is None:
        return f"seeds {', '.join(map(str, sweep.seeds))}"
    counts = rep.seeds.values()
    return (f"sequential seeds {sweep.sequential.text()} (start:max:step; {min(counts, default=0)}-"
            f"{max(counts, default=0)} per row, the section Sequential seeds)")


# what a sequential sweep's looks test, as its report's Sequential seeds section says
SWEEP_JUDGED = "every relation of the sweep's claims in every run group"


def write_report(sweep: SweepConfig, runs: list[Run], results: dict[str, dict], out_dir: Path,
                 plots: list[Path], rep: sequential.Replay | None = None) -> str:
    """`rep`: a sequential sweep's looks (sweeps/sweep_sequential.py), `runs` the runs they judged: the report says
    the rule, the looks and each row's seeds, and its claims are judged as the looks judged them."""
    tables = build_tables(sweep, runs, results)
    commonest = commonest_answer_line(runs, results)
    groups = list(dict.fromkeys(r.group for r in runs))
    pes = list(dict.fromkeys(r.pe for r in runs))
    ci = (interval_label(DEFAULT_METHOD, sweep.confidence, len(sweep.seeds)) if rep is None
          else sequential.each_row_label(sweep.confidence))
    parts = [f"# Sweep `{sweep.name}`", "",
             f"{len(runs)} runs: sizes {', '.join(sweep.sizes)}; PEs {', '.join(pes)}; {seeds_text(sweep, rep)}"
             + (f"; varied {', '.join(sweep.vary)}" if sweep.vary else "") + ".",
             data_line(runs),
             f"Every figure: mean over seeds [{ci}] (one seed: the value alone; fewer than 3: no interval, "
             "docs/statistics.md); "
             "n/a = the PE cannot represent that length. Throughput: throughput.md.", "",
             *run_protocol.section(protocol.sweep_items(sweep, runs))]
    sections = [
        ("Loss", tables["loss"], False, ""),
        ("Perplexity vs context length (non-overlapping windows)", tables["ppl"], False,
         "Columns: context length in tokens." + ppl_tokens_line(runs, results)),
        ("Perplexity slope past the training length", tables["slope"], False,
         "Least-squares slope of perplexity against log2(length / training length), lengths from the training "
         "length on: perplexity gained per doubling of the context (flat = 0)."),
        ("Attention to the first token (mean over layers)", tables["first_token"], False,
         "Columns: window length in tokens; the mean attention probability on each window's first token over "
         "heads and queries 1..L-1 (eval suite `first_token`): the attention sink that gated attention removes "
         "(Qiu et al. 2025)."),
        ("Algorithmic tasks, pretrained with the mix (exact match, %)", tables["algorithmic"], True,
         "Zero-shot in the mix's own prompt format; ID = the training range of the task, OOD = longer "
         "instances; exact match of whole answers, and, where answers reach past the training length, the share "
         "of those answer tokens right (*beyond train length*). Exact match by chance (whole answers guessed "
         "uniformly): " + chance_line(runs, results) + "."
         + (f" Always giving the commonest answer of these examples scores: {commonest}." if commonest else "")),
        ("Passkey retrieval (accuracy %, mean over depths)", tables["passkey"], True, "Columns: length in tokens."),
        ("Needle in a haystack (accuracy %, mean over depths)", tables["niah"], True, "Columns: length in tokens."),
    ]
    for title, table, pct, note in sections:
        if not table.columns or all(v is None for vs in table.values.values() for v in vs):
            continue
        parts += [f"## {title}", ""] + ([note, ""] if note else []) + [table.markdown(groups, pes, pct), ""]
    parts += long_context_report.long_context_section(long_context_report.grids_from_suites(
        (r.group, r.pe, r.seed, results.get(r.name)) for r in runs), sweep.confidence, sweep.n_boot)
    if rep is not None:
        parts += sequential.section(rep, sweep, judged=SWEEP_JUDGED, group="size", what="sweep")
    if sweep.claims:
        parts += claims_part(sweep, tables, groups, rep)
    if plots:
        parts += ["## Plots", ""] + [f"![{p.stem}]({p.relative_to(out_dir).as_posix()})" for p in plots] + [""]
    text = "\n".join(parts)
    with atomic_open(out_dir / "report.md", "w") as f:
        f.write(text)
    write_csv(tables, out_dir / "results.csv")
    write_throughput(runs, out_dir / "throughput.md")
    return text


def claims_part(sweep: SweepConfig, tables: dict[str, Table], groups: list[str],
                rep: sequential.Replay | None = None) -> list[str]:
    """The report's claims section (studies/claims.report_section, a study's too): each claim judged per group of
    runs on the per-seed values of its metric (runs share seeds across PEs, so differences are paired by seed).
    `rep`: a sequential sweep's looks, whose verdicts (at the boundary, kept from the deciding look) are shown."""
    jobs = []
    for claim in sweep.claims:
        table, column = CLAIM_TABLES[claim.metric]
        by_group = {g: {pe: tables[table].by_seed.get((g, pe, column), {}) for pe in claim.names} for g in groups}
        jobs.append((claim, by_group, False, column))
    return report_section(jobs, sweep.confidence, sweep.n_boot,
                          None if rep is None else lambda checks: sequential.at_the_looks(checks, rep))


def write_csv(tables: dict[str, Table], path: Path) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["table", "runs", "pe", "column", "n", "mean", "ci_lo", "ci_hi", "values"])
    for name, table in tables.items():
        for (group, pe, column), values in table.values.items():
            s = table.summary(group, pe, column)
            w.writerow([name, group, pe, column, s.n, s.mean, s.lo, s.hi, json.dumps(values)])
    with atomic_open(path, "w") as f:
        f.write(buf.getvalue())


def write_throughput(runs: list[Run], path: Path) -> None:
    rows = []
    for run in runs:
        m = metrics_rows(run)
        tps, mfu = median(m, "tokens_per_s"), median(m, "mfu")
        rows.append([run.name, f"{last(m, 'tokens') or 0:,.0f}", "n/a" if tps is None else f"{tps:,.0f}",
                     "n/a" if not mfu else f"{100 * mfu:.1f}%"])  # None (0 in older logs): no known peak (CPU)
    text = ("# Throughput per run\n\nMedian over logged steps (wall-clock figures: they differ run to run, so "
            "they live here and not in report.md).\n\n"
            + md_table(["run", "tokens", "tokens/s", "MFU"], rows) + "\n")
    with atomic_open(path, "w") as f:
        f.write(text)
