"""What eval.py writes: results.json (every number, the configs, the checkpoint, the code version), a
markdown summary and PNG plots, per checkpoint; for several checkpoints also one comparison summary and
shared plots (one line / panel per checkpoint).

JSON is written strictly (allow_nan=False): "n/a" is null, never NaN, and a NaN that slipped through
fails loudly instead of producing a file other tools cannot parse.
"""

from __future__ import annotations

import json
import subprocess
from importlib import metadata
from pathlib import Path

from posbench.evaluation import protocol
from posbench.evaluation.suites import get_suite
from posbench.fileio import write_text

REPO_ROOT = Path(__file__).resolve().parents[3]
NA_NOTE = ("n/a: not measured, never clamped or guessed; the reason is given per cell in each summary and in "
           "results.json. The reasons: the PE cannot represent that many positions (e.g. beyond a learned table); "
           "an in-distribution (ID) prompt, answer included, does not fit in the training length, alone or with "
           "its demonstrations; (passkey, needle) the length cannot hold the question and answer; (beyond columns) "
           "no answer token of the cell lies past the training length.")


def code_version() -> str:
    """`git describe` of the code that ran (with -dirty for local edits), else the package version."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return f"git {out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return f"posbench {metadata.version('posbench')}"
    except metadata.PackageNotFoundError:
        return "unknown"


def write_json(path: Path, payload: dict) -> Path:
    write_text(path, json.dumps(payload, indent=1, allow_nan=False) + "\n")  # readers never see half a file
    return path


def describe_model(run_cfg: dict) -> str:
    m, pe = run_cfg["model"], run_cfg["pe"]
    return (f"{m['size']} (d_model {m['d_model']}, {m['n_layers']} layers, {m['n_heads']} heads, vocab "
            f"{m['vocab_size']}), trained at seq_len {m['seq_len']}, PE `{pe['name']}`")


def dope_line(payload: dict) -> str:
    """What DoPE did (evaluation/dope.py): its settings and the heads chosen per suite and length, as layer.head."""
    dope = payload.get("dope")  # results written before DoPE existed have none
    if not dope:
        return "- DoPE at evaluation: none"
    chosen = "; ".join(f"{r['suite']} {r['length']}: " + (", ".join(f"L{h['layer']}H{h['head']}" for h in r["heads"])
                                                          or r.get("na", "none"))
                       for r in payload.get("dope_heads") or [])
    return (f"- DoPE at evaluation (posbench's reading, docs/pe_defaults.md): {dope['mode']['name']} on the "
            f"{dope['n_heads']} {'lowest' if dope['order'] == 'ascending' else 'highest'}-scoring heads by "
            f"{dope['indicator']} ({dope['stage']}, Trunc-{dope['truncate']}); chosen: {chosen or 'none'}")


def checkpoint_markdown(payload: dict, plot_paths: list[Path], out_dir: Path) -> str:
    scaling = payload["rope_scaling"]
    lines = [f"# Evaluation of {payload['label']}", "",
             f"- checkpoint: `{payload['checkpoint']}` (step {payload['step']}, {payload['tokens']} tokens)",
             f"- model: {describe_model(payload['config'])}",
             f"- RoPE scaling at evaluation: {scaling['name']} x{scaling['factor']:g}" if scaling
             else "- RoPE scaling at evaluation: none (as trained)",
             dope_line(payload),
             f"- lengths: {', '.join(map(str, payload['lengths']))} tokens",
             f"- code: {payload['code_version']}; device {payload['device']}, {payload['precision']}; "
             f"{payload['elapsed_s']:.1f} s", ""]
    # results written before the protocol was recorded have none
    lines += protocol.section([tuple(i) for i in payload["protocol"]]) if payload.get("protocol") else []
    for name, result in payload["suites"].items():
        suite = get_suite(name)
        lines += [f"## {suite.title}", "", suite.markdown(result), ""]
    if plot_paths:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.relative_to(out_dir)})" for p in plot_paths] + [""]
    lines.append(NA_NOTE)
    return "\n".join(lines) + "\n"


def comparison_markdown(payloads: list[dict], plot_paths: list[Path], out_dir: Path) -> str:
    lines = ["# Evaluation comparison", "", "| checkpoint | model | RoPE scaling | results |", "|---|---|---|---|"]
    for p in payloads:
        s = p["rope_scaling"]
        scaling = f"{s['name']} x{s['factor']:g}" if s else "none"
        lines.append(f"| {p['label']} | {describe_model(p['config'])} | {scaling} | "
                     f"[{p['label']}]({p['label']}/summary.md) |")
    lines.append("")
    suites = list(dict.fromkeys(name for p in payloads for name in p["suites"]))
    for name in suites:
        suite = get_suite(name)
        results = {p["label"]: p["suites"][name] for p in payloads if name in p["suites"]}
        lines += [f"## {suite.title}", "", suite.comparison(results), ""]
    if plot_paths:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.relative_to(out_dir)})" for p in plot_paths] + [""]
    lines.append(f"code: {payloads[0]['code_version']}. {NA_NOTE}")
    return "\n".join(lines) + "\n"


def suite_plots(payloads: list[dict], out_dir: Path) -> list[Path]:
    paths = []
    suites = list(dict.fromkeys(name for p in payloads for name in p["suites"]))
    for name in suites:
        results = {p["label"]: p["suites"][name] for p in payloads if name in p["suites"]}
        paths += get_suite(name).plots(results, out_dir)
    return paths


def write_checkpoint_report(payload: dict, out_dir: Path) -> dict[str, Path]:
    write_json(out_dir / "results.json", payload)
    plot_paths = suite_plots([payload], out_dir)
    write_text(out_dir / "summary.md", checkpoint_markdown(payload, plot_paths, out_dir))
    return {"results": out_dir / "results.json", "summary": out_dir / "summary.md",
            **{p.stem: p for p in plot_paths}}


def write_comparison(payloads: list[dict], out_dir: Path) -> dict[str, Path]:
    plot_paths = suite_plots(payloads, out_dir)
    write_text(out_dir / "summary.md", comparison_markdown(payloads, plot_paths, out_dir))
    write_json(out_dir / "comparison.json", {"checkpoints": [p["label"] for p in payloads],
                                             "results": {p["label"]: f"{p['label']}/results.json" for p in payloads}})
    return {"summary": out_dir / "summary.md", **{p.stem: p for p in plot_paths}}
