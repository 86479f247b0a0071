"""A study's paper-ready tables beside report.md: report.tex (booktabs tables of the summary and of the pair
verdicts, a standalone document that also \\input{}s into a paper) and summary.csv (one row per task and PE: each
metric's mean and interval ends over seeds, as fractions). Both are written from the same rows report.md shows
(study_report.summarize) and the same pair tests (stats.pairwise), so the three never disagree."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace

from posbench.stats import Summary, pairwise

# (column head, metric key) of the summary table, accuracies in percent
SUMMARY_COLUMNS = (("ID acc.", "id_acc"), ("OOD beyond", "ood_beyond_acc"), ("OOD all", "ood_acc"))
VERDICT_WORDS = {">": "ordered", "<": "ordered", "~": "the same", "?": "inconclusive"}
_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
            "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def escape(text: str) -> str:
    return "".join(_ESCAPES.get(ch, ch) for ch in str(text))


def _pct(s: Summary) -> str:
    if s.mean is None:
        return "n/a"
    return f"{100 * s.mean:.1f}" + ("" if s.lo is None else f" [{100 * s.lo:.1f}, {100 * s.hi:.1f}]")


def _table(columns: str, head: list[str], rows: list[list[str]], caption: str) -> list[str]:
    return ["\\begin{table}[t]", "\\centering", f"\\caption{{{escape(caption)}}}", f"\\begin{{tabular}}{{{columns}}}",
            "\\toprule", " & ".join(head) + " \\\\", "\\midrule", *(" & ".join(r) + " \\\\" for r in rows),
            "\\bottomrule", "\\end{tabular}", "\\end{table}", ""]


def summary_rows(rows: list[dict]) -> list[list[str]]:
    return [[escape(r["task"]), escape(r["pe"] + (" " + " ".join(f"{k.split('.')[-1]}={v}" for k, v in
                                                               r["axes"].items()) if r["axes"] else "")),
             *(_pct(r[key]) for _, key in SUMMARY_COLUMNS)] for r in rows]


def verdicts(by_group: dict, confidence: float, n_boot: int, margin: float | None, decided=None) -> list[dict]:
    """One verdict per PE pair of each task (by_group: {(task, axes): {pe: {seed: value}}}): the pair in the order
    the seeds show (`a` > `b` when ordered), the paired difference a - b (points, with its interval) and the verdict
    after Holm over the task's pairs: what report.md, report.tex and the app show. `decided(task, axes, a, b)`: the
    verdict when another rule reached it (a sequential study's looks), ">", "<", "~" or "?"."""
    out = []
    for (task, _axes), per_pe in by_group.items():
        for p in pairwise(per_pe, confidence, n_boot, margin):
            if decided is not None:
                p = replace(p, verdict=decided(task, _axes, p.a, p.b))
            flip = p.verdict == "<"
            a, b, sign, d = (p.b, p.a, -1, p.diff) if flip else (p.a, p.b, 1, p.diff)
            diff = "n/a" if d.mean is None else f"{sign * 100 * d.mean:+.1f}" + (
                "" if d.lo is None else f" [{100 * min(sign * d.lo, sign * d.hi):+.1f}, "
                                        f"{100 * max(sign * d.lo, sign * d.hi):+.1f}]")
            out.append({"task": task, "a": a, "relation": {">": ">", "<": ">", "~": "~", "?": "vs"}[p.verdict],
                        "b": b, "difference": diff, "verdict": VERDICT_WORDS[p.verdict]})
    return out


def verdict_rows(found: list[dict]) -> list[list[str]]:
    tex = {">": "$>$", "~": "$\\approx$", "vs": "vs"}
    return [[escape(v["task"]), f"{escape(v['a'])} {tex[v['relation']]} {escape(v['b'])}", v["difference"],
             v["verdict"]] for v in found]


def report_tex(study_name: str, rows: list[dict], found: list[dict], confidence: float) -> str:
    pct = f"{confidence:.0%}"
    lines = ["\\documentclass{article}", "\\usepackage{booktabs}", "\\begin{document}", ""]
    lines += _table("ll" + "r" * len(SUMMARY_COLUMNS), ["Task", "PE", *(h + " (\\%)" for h, _ in SUMMARY_COLUMNS)],
                    summary_rows(rows), f"Study {study_name}: accuracy per target position, mean over seeds "
                                        f"[{pct} t-interval]; OOD beyond = past the training length.")
    lines += _table("lllr", ["Task", "Pair", "Difference (pts)", "Verdict"], verdict_rows(found),
                    f"Study {study_name}: paired differences in OOD accuracy beyond the training length "
                    f"[{pct} t-interval], verdicts after Holm over each task's pairs.")
    return "\n".join(lines + ["\\end{document}", ""])


def summary_csv(rows: list[dict], metrics: tuple[str, ...]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["task", "pe", "axes", "n_seeds", *(f"{m}_{end}" for m in metrics for end in ("mean", "lo", "hi"))])
    for r in rows:
        values = []
        for m in metrics:
            s = r[m]
            values += ["" if v is None else repr(float(v)) for v in (s.mean, s.lo, s.hi)]
        w.writerow([r["task"], r["pe"], json.dumps(r["axes"], sort_keys=True), len(r["seeds"]), *values])
    return buf.getvalue()
