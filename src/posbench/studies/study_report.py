"""Study results -> summary rows, report.md, results.json and results.csv (deterministic: the same
cell results always give byte-identical files)."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

from posbench.evaluation import protocol as run_protocol
from posbench.fileio import write_text
from posbench.stats import (
    DEFAULT_METHOD,
    interval,
    interval_label,
    paired_diffs,
    pairwise,
    seeds_needed,
    success_rate,
)
from posbench.studies import protocol, report_tex, sequential
from posbench.studies.cell_result import CellResult
from posbench.studies.claims import DEFAULT_MARGINS, report_section
from posbench.studies.digits_report import beyond_curve_table, exact_by_digits_table
from posbench.studies.long_context_report import grids_from_cells, long_context_section
from posbench.studies.rows import group_key  # noqa: F401  (read here by the plots, app and compare)
from posbench.studies.study_spec import METRICS, StudyConfig

# what a metric cannot leave: intervals are clipped to it (an accuracy's t-interval can reach past 100%)
BOUNDS = {"id_acc": (0.0, 1.0), "ood_beyond_acc": (0.0, 1.0), "ood_acc": (0.0, 1.0), "ood_within_acc": (0.0, 1.0),
          "id_exact": (0.0, 1.0), "ood_exact": (0.0, 1.0), "gap": (-1.0, 1.0), "id_loss": (0.0, float("inf")),
          "ood_loss": (0.0, float("inf"))}

# ood_beyond_acc is the headline OOD figure: accuracy at target positions past the training length only.
# ood_acc (all positions of the longer examples) mixes in-range positions in and stays, labelled as such.


def summarize(results: list[CellResult], study: StudyConfig) -> list[dict]:
    """One row per (task, PE, axes): every metric's mean and CI over seeds, and success rates."""
    groups: dict[tuple, list[CellResult]] = defaultdict(list)
    for r in results:
        groups[group_key(r)].append(r)
    rows = []
    ev = study.eval
    for (task, pe, axes), cells in groups.items():
        row = {"task": task, "pe": pe, "axes": dict(axes), "seeds": sorted(c.seed for c in cells),
               "chance": cells[0].chance}
        for m in METRICS:
            row[m] = interval([c.metric(m) for c in cells], ev.confidence, DEFAULT_METHOD, ev.n_boot,
                              bounds=BOUNDS.get(m))
        for m in ("id_acc", "ood_acc", "ood_beyond_acc"):
            row[f"{m}_success"] = success_rate([c.metric(m) for c in cells], ev.success_threshold)
            row[f"{m}_by_seed"] = {c.seed: c.metric(m) for c in cells}
        rows.append(row)
    return rows


def _axes_label(axes: dict) -> str:
    return " ".join(f"{k.split('.')[-1]}={v}" for k, v in axes.items())


def seeds_label(study: StudyConfig) -> str:
    """What a table's intervals are: "95% t-interval over 5 seeds"; with sequential seeds each row has its own
    count (the section Sequential seeds lists them)."""
    if study.sequential is not None:
        return sequential.each_row_label(study.eval.confidence)
    return interval_label(DEFAULT_METHOD, study.eval.confidence, len(study.seeds))


def summary_table(rows: list[dict], study: StudyConfig) -> str:
    label = seeds_label(study)
    thr = int(100 * study.eval.success_threshold)
    head = (f"| task | PE{' | axes' if any(r['axes'] for r in rows) else ''} | ID acc % [{label}] | "
            f"OOD beyond train length % [{label}] | OOD all positions % | OOD success (beyond, >= {thr}%) | "
            f"ID loss | OOD loss | gap (ID - beyond, pts) | chance % |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in rows:
        succ = "n/a" if r["ood_beyond_acc_success"] is None else f"{r['ood_beyond_acc_success']:.0%}"
        axes = f" | {_axes_label(r['axes'])}" if any(x["axes"] for x in rows) else ""
        lines.append(f"| {r['task']} | {r['pe']}{axes} | {r['id_acc'].fmt()} | {r['ood_beyond_acc'].fmt()} | "
                     f"{r['ood_acc'].fmt()} | {succ} | {r['id_loss'].fmt(False)} | {r['ood_loss'].fmt(False)} | "
                     f"{r['gap'].fmt()} | {100 * r['chance']:.0f} |")
    return "\n".join(lines)


def reference_table(rows: list[dict], study: StudyConfig) -> str:
    if not study.reference:
        return ""
    # the reference reports one OOD number per cell, over all positions of the longer examples: ours is
    # compared on the same metric (all positions), and our beyond-length figure is shown beside it
    lines = ["| task | PE | reference ID | ours ID | reference OOD (all positions) | ours OOD (all positions) | "
             "ours OOD beyond train length | verdict (same metric) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = study.reference.get(r["task"], {}).get(r["pe"])
        if not ref or not {"id", "ood"} & set(ref):  # exact-match references: exact_reference_table
            continue
        verdicts = []
        for split in ("id", "ood"):
            if split not in ref:
                continue
            verdicts.append(f"{split.upper()}: "
                            f"{_verdict(ref[split], r[f'{split}_acc'], r[f'{split}_acc_by_seed'], r['chance'])}")
        fmt = lambda v: "-" if v is None else f"{100 * v:.1f}"
        lines.append(f"| {r['task']} | {r['pe']} | {fmt(ref.get('id'))} | {r['id_acc'].fmt()} | "
                     f"{fmt(ref.get('ood'))} | {r['ood_acc'].fmt()} | {r['ood_beyond_acc'].fmt()} | "
                     f"{'; '.join(verdicts)} |")
    return "\n".join(lines) if len(lines) > 2 else ""  # only exact-match references: no empty table


def exact_reference_table(results: list[CellResult], study: StudyConfig) -> str:
    """Whole-answer exact match (a word translated right, every character) and the per-character loss
    against references given as `id_exact` / `ood_exact` / `id_loss` (e.g. the Pig Latin write-up's word
    accuracy); the verdict rule is `_verdict`'s, on the exact-match CI over seeds."""
    groups: dict[tuple, list[CellResult]] = defaultdict(list)
    for r in results:
        groups[group_key(r)].append(r)
    ev, fmt = study.eval, (lambda v: "-" if v is None else f"{100 * v:.1f}")
    lines = []
    for (task, pe, _axes), cells in groups.items():
        ref = study.reference.get(task, {}).get(pe, {})
        if not {"id_exact", "ood_exact"} & set(ref):
            continue
        stats = {m: interval([c.metric(m) for c in cells], ev.confidence, DEFAULT_METHOD, ev.n_boot,
                             bounds=BOUNDS[m]) for m in ("id_exact", "ood_exact", "id_loss")}
        verdict = "; ".join(
            f"{m.split('_')[0].upper()}: " + _verdict(ref[m], stats[m], {c.seed: c.metric(m) for c in cells})
            for m in ("id_exact", "ood_exact") if m in ref)
        loss = "-" if ref.get("id_loss") is None else f"{ref['id_loss']:.3f}"
        params = "-" if cells[0].params is None else cells[0].params
        lines.append(f"| {task} | {pe} | {params} | {fmt(ref.get('id_exact'))} | "
                     f"{stats['id_exact'].fmt()} | {stats['ood_exact'].fmt()} | {loss} | "
                     f"{stats['id_loss'].fmt(False)} | {verdict} |")
    if not lines:
        return ""
    label = seeds_label(study)
    return "\n".join([f"| task | row | params | reference exact % | ours ID exact % [{label}] | ours OOD exact % | "
                      "reference loss/char | ours ID loss/target | verdict |", "|---|---|---|---|---|---|---|---|---|",
                      *lines])


def _verdict(reference: float, ours, by_seed: dict, chance: float | None = None) -> str:
    """Agrees when the reference lies in our interval (within half a point of our mean when every seed gave the
    same value, so the interval is a point); `seed-dependent` when our seeds span more than 30 points: a single
    seed could have shown either. A reference below chance is said to be."""
    if ours.mean is None:
        return "ours n/a"
    vals = [v for v in by_seed.values() if v is not None]
    spread = max(vals) - min(vals)
    below = (f"; the reference is {100 * (chance - reference):.0f} pts below chance ({100 * chance:.0f}%)"
             if chance is not None and reference < chance - 0.02 else "")
    if spread > 0.3:
        return f"seed-dependent (our seeds span {100 * min(vals):.0f}-{100 * max(vals):.0f}){below}"
    if ours.lo is None:
        return f"no interval over {ours.n} seeds{below}"
    inside = ours.lo - 0.005 <= reference <= ours.hi + 0.005 if ours.hi - ours.lo < 0.01 else \
        ours.lo <= reference <= ours.hi
    return ("agrees" if inside else f"differs ({100 * (ours.mean - reference):+.0f} pts)") + below


def by_group(results: list[CellResult], metric: str) -> dict[tuple, dict[str, dict]]:
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in results:
        task, pe, axes = group_key(r)
        groups[(task, axes)].setdefault(pe, {})[r.seed] = r.metric(metric)
    return groups


def _negated(s):
    return replace(s, mean=-s.mean, lo=None if s.hi is None else -s.hi, hi=None if s.lo is None else -s.lo)


def comparisons(results: list[CellResult], study: StudyConfig, metric: str = "ood_beyond_acc",
                rep: sequential.Replay | None = None) -> str:
    """Per task (and axes): every PE pair as one family (Holm), ordered where the seeds show a difference, "the
    same" where they show equivalence within the metric's margin, undecided otherwise. `rep`: a sequential study's
    looks, whose verdicts (reached at the boundary, kept from the look that decided them) replace the fixed test's."""
    margin = DEFAULT_MARGINS.get(metric)
    out = []
    for (task, axes), per_pe in by_group(results, metric).items():
        pairs = judged_pairs(per_pe, task, axes, study, metric, rep)
        judged = [p for p in pairs if p.p_differ is not None]
        ordered = [f"{p.a} > {p.b} ({p.diff.fmt()} pts)" if p.verdict == ">" else
                   f"{p.b} > {p.a} ({_negated(p.diff).fmt()} pts)" for p in pairs if p.verdict in "<>"]
        same = [f"{p.a} ~ {p.b} ({p.diff.fmt()})" for p in pairs if p.verdict == "~"]
        open_ = [f"{p.a} vs {p.b} ({p.diff.fmt()})" for p in pairs if p.verdict == "?"]
        label = f"{task} {_axes_label(dict(axes))}".strip()
        parts = [f"ordered: {'; '.join(ordered)}" if ordered else "no pair shown to differ"]
        if same:
            parts.append(f"the same within +-{100 * margin:g} pts: {'; '.join(same)}")
        if open_:
            parts.append(f"inconclusive: {'; '.join(open_)}")
        rule = "" if rep is None else f" at the sequential boundary ({rep.boundary.describe()})"
        out.append(f"- **{label}** (Holm over {len(judged)} pairs{rule}): " + ". ".join(parts))
    return "\n".join(out)


def looks(results: list[CellResult], study: StudyConfig) -> sequential.Replay | None:
    """A sequential study's looks replayed from its finished cells (None for a fixed study): the verdicts its report,
    its published page and a comparison of runs all read."""
    if study.sequential is None:
        return None
    return sequential.replay(study, results, list(dict.fromkeys(group_key(r) for r in results)))


def judged_pairs(per_pe: dict, task: str, axes, study: StudyConfig, metric: str = "ood_beyond_acc",
                 rep: sequential.Replay | None = None) -> list:
    """One task's PE pairs (one Holm family), each with its verdict: the fixed test's over the seeds the data has,
    or for a sequential study the one its looks reached at the boundary."""
    pairs = pairwise(per_pe, study.eval.confidence, study.eval.n_boot, DEFAULT_MARGINS.get(metric))
    return pairs if rep is None else [_at_look(p, rep.pair(task, axes, p.a, p.b)) for p in pairs]


def decided_by(rep: sequential.Replay | None):
    """report_tex.verdicts' `decided` for a sequential study's looks (None for a fixed study): each pair's verdict as
    the looks reached it, what the report, its .tex and the app all show."""
    return None if rep is None else (lambda task, axes, a, b: _state(rep.pair(task, axes, a, b)))


def _state(v: sequential.Verdict | None) -> str:
    """A pair's verdict symbol as the sequential looks reached it ("?" when they never judged it)."""
    return "?" if v is None or v.state == "n/a" else v.state


def _at_look(p, v: sequential.Verdict | None):
    """A pair's verdict as the sequential looks reached it (undecided when the looks never judged it)."""
    if v is None or v.state == "n/a":
        return replace(p, verdict="?")
    return replace(p, verdict=v.state, p_differ=v.p_a, p_same=v.p_b)


def _at_chance(values: dict, chance: float | None, margin: float) -> bool:
    s = interval(list(values.values()))
    return chance is not None and s.lo is not None and s.lo - margin <= chance <= s.hi + margin \
        and abs(s.mean - chance) <= margin


SEED_COLUMNS = ("task", "best two PEs (beyond train length)", "paired difference, pts", "separated now",
                "seeds needed (estimate)")


def seed_calibration_rows(results: list[CellResult], ev, metric: str = "ood_beyond_acc") -> list[dict]:
    """Per task (and axes): the two best PEs on the headline metric, their paired difference over seeds, and
    how many seeds the same t test would need to separate them if the effect stays as observed (`ev`: the
    study's eval settings). Rows keyed by SEED_COLUMNS: what report.md and the app show."""
    groups = by_group([r for r in results if r.metric(metric) is not None], metric)
    chance = {r.task: r.chance for r in results}
    margin = DEFAULT_MARGINS.get(metric, 0.02)
    rows = []
    for (task, axes), per_pe in groups.items():
        ranked = sorted(per_pe, key=lambda pe: -sum(per_pe[pe].values()) / len(per_pe[pe]))
        if len(ranked) < 2:
            continue
        a, b = ranked[:2]
        diffs = paired_diffs(per_pe[a], per_pe[b])
        c = interval(diffs, ev.confidence, DEFAULT_METHOD, ev.n_boot)
        need = seeds_needed(diffs, ev.confidence)
        separated = c.lo is not None and (c.lo > 0 or c.hi < 0)
        if len(diffs) < 2:
            verdict = "n/a: one seed has no spread to judge by"
        elif all(_at_chance(per_pe[pe], chance.get(task), margin) for pe in (a, b)):
            verdict = f"both at chance ({100 * chance[task]:.0f}%): nothing to separate"
        else:
            verdict = "not separable at this effect (mean difference 0)" if need is None else str(need)
        values = (f"{task} {_axes_label(dict(axes))}".strip(), f"{a} vs {b}", c.fmt(), "yes" if separated else "no",
                  verdict)
        rows.append(dict(zip(SEED_COLUMNS, values, strict=True)))
    return rows


def seed_calibration(results: list[CellResult], study: StudyConfig, metric: str = "ood_beyond_acc") -> str:
    """The seed calibration table of report.md (`seed_calibration_rows`)."""
    label = seeds_label(study)
    heads = [f"{h} [{label}]" if h == SEED_COLUMNS[2] else h for h in SEED_COLUMNS]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(r.values()) + " |" for r in seed_calibration_rows(results, study.eval, metric)]
    return "\n".join(lines)


def claim_groups(results: list[CellResult], metric: str) -> dict[str, dict[str, dict]]:
    """{"task [axes]": {pe: {seed: metric}}}: what a claim is judged on, per task."""
    groups: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in results:
        task, pe, axes = group_key(r)
        label = f"{task} {_axes_label(dict(axes))}".strip()
        groups[label].setdefault(pe, {})[r.seed] = r.metric(metric)
    return dict(groups)


def claims_part(results: list[CellResult], study: StudyConfig, rep: sequential.Replay | None = None) -> list[str]:
    """The report's claims section (studies/claims.report_section, a sweep's too), judged per task on the cells.
    `rep`: a sequential study's looks: each relation's p-values are those of the look that decided it (or the last
    look), on the fixed test's scale at the sequential boundary."""
    jobs = [(claim, claim_groups(results, claim.metric), True, "pts") for claim in study.claims]
    return report_section(jobs, study.eval.confidence, study.eval.n_boot,
                          None if rep is None else lambda checks: sequential.at_the_looks(checks, rep))


def seeds_text(study: StudyConfig, results: list[CellResult]) -> str:
    """ "5 seeds", or for sequential seeds "sequential seeds 3:10:1 (3-7 per row)"."""
    if study.sequential is None:
        return f"{len(study.seeds)} seeds"
    counts = Counter(group_key(r) for r in results).values()
    return (f"sequential seeds {study.sequential.text()} (start:max:step; "
            f"{min(counts, default=0)}-{max(counts, default=0)} per row)")


def write_outputs(out_dir: Path, results: list[CellResult], study: StudyConfig, plots: list[str]) -> str:
    rows = summarize(results, study)
    pct = int(100 * study.eval.confidence)
    rep = looks(results, study)
    parts = [f"# Study `{study.name}`", "",
             f"{len(results)} cells: {len(study.tasks)} tasks x {len(study.rows())} rows (PEs, arms) x "
             f"{seeds_text(study, results)}"
             + (f" x {', '.join(f'{k} {v}' for k, v in study.vary.items())}" if study.vary else "")
             + f"; {study.train.steps} steps, batch {study.train.batch_size}, lr {study.train.lr}; "
             f"{study.eval.n_examples} evaluation examples per split. Accuracy is per target position "
             f"(teacher forcing); intervals are {pct}% Student t-intervals of the mean over seeds "
             f"({seeds_label(study)}; docs/statistics.md says "
             "why this method). OOD examples are longer than "
             "any training example: *beyond train length* scores only their target positions past the "
             "training length (extrapolation); *all positions* also counts the positions inside it."
             + devices_line(results) + matmul_line(results), "",
             *run_protocol.section(protocol.study_items(study, devices_line(results).strip())),
             "## Summary", "", summary_table(rows, study), ""]
    ref = reference_table(rows, study)
    if ref:
        parts += ["## Against the reference", "", study.reference_note, "", ref, ""]
    exact = exact_reference_table(results, study)
    if exact:
        parts += ["## Exact match against the reference", "", study.reference_note, "", exact, ""]
    by_digits = exact_by_digits_table(results, study.eval.confidence, study.eval.n_boot)
    if by_digits:
        label = seeds_label(study)
        parts += [f"## Exact match per digit count ({label})", "", by_digits]
    by_step = beyond_curve_table(results, study.eval.confidence, study.eval.n_boot)
    if by_step:
        parts += ["## Exact match at and past the trained digit counts, by training step", "",
                  "Teacher-forced exact match at each learning-curve checkpoint (greedy decoding's, up to float "
                  "ties: a greedy decoder writes the answer right exactly when every answer token is the argmax given "
                  "the right ones before it), at the longest trained digit count and on groups of untrained counts up "
                  "to the longest tested, mean % [CI] over seeds.", "", by_step]
    parts += long_context_section(grids_from_cells(results, study.eval.length_grid.keep), study.eval.confidence,
                                  study.eval.n_boot)
    if rep is not None:
        parts += sequential.section(rep, study)
    if study.claims:
        parts += claims_part(results, study, rep)
    parts += ["## Which PEs differ on OOD accuracy beyond the training length", "",
              f"Per task, every pair of PEs: a paired t test over seeds ({pct}%) of \"they differ\" and two "
              f"one-sided tests of \"the same within +-{100 * DEFAULT_MARGINS['ood_beyond_acc']:g} pts\", each "
              "adjusted with Holm over the task's pairs (family-wise error "
              f"{100 - pct}%). Differences in points, {pct}% t-intervals, before adjustment.", "",
              comparisons(results, study, rep=rep), "",
              "## How many seeds separate the top two PEs", "",
              f"Smallest n whose {pct}% t-interval of the paired per-seed differences excludes 0 with this mean and "
              "spread (t_{n-1} * sd / sqrt(n) < |mean|), if the effect stays as these seeds show it; one pair, "
              "before any adjustment for many pairs.", "",
              seed_calibration(results, study), "", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    report = "\n".join(parts) + "\n"
    write_text(out_dir / "report.md", report)
    data = {"study": study.name, "cells": [r.to_data() for r in results]}
    if rep is not None:  # the looks' verdicts, as data (a fixed study's results.json is as it was)
        data["sequential"] = sequential.record(rep, study.sequential)
    write_text(out_dir / "results.json", json.dumps(data, indent=1, sort_keys=True))
    write_text(out_dir / "results.csv", to_csv(results))
    metric = "ood_beyond_acc"
    verdicts = report_tex.verdicts(by_group(results, metric), study.eval.confidence, study.eval.n_boot,
                                   DEFAULT_MARGINS.get(metric), decided_by(rep))
    write_text(out_dir / "report.tex", report_tex.report_tex(study.name, rows, verdicts, study.eval.confidence))
    write_text(out_dir / "summary.csv", report_tex.summary_csv(rows, METRICS))
    return summary_table(rows, study)


def devices_line(results: list[CellResult]) -> str:
    """Where the cells trained, e.g. " Trained on cuda: NVIDIA H100 80GB HBM3 (33 cells)." (results written before
    cells recorded it count as cpu, the only device studies had then)."""
    counts = Counter(r.device or "cpu" for r in results)
    return " Trained on " + ", ".join(f"{d} ({n} cells)" for d, n in sorted(counts.items())) + "."


def matmul_line(results: list[CellResult]) -> str:
    """Which library ran the cells' linear layers (model.matmul, model/matmul_choice.py), e.g. " Linear layers
    (model.matmul) on onednn (20 cells)."; empty for results written before cells recorded it."""
    counts = Counter(r.matmul for r in results if r.matmul is not None)
    if not counts:
        return ""
    return " Linear layers (model.matmul) on " + ", ".join(f"{m} ({n} cells)" for m, n in sorted(counts.items())) + "."


def to_csv(results: list[CellResult]) -> str:
    buf = io.StringIO()
    metrics = [*METRICS, "id_exact", "ood_exact", "chance"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["cell_id", "task", "pe", "seed", "axes", *metrics])
    for r in results:
        w.writerow([r.cell_id, r.task, r.pe, r.seed, json.dumps(r.axes, sort_keys=True), *map(r.metric, metrics)])
    return buf.getvalue()
