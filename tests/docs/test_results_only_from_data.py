"""Results are published only where they are generated from data (docs/reading-a-report.md, "Where a published
number comes from"): outside docs/results/ and outside the README's `<!-- results: NAME ... -->` blocks (which
tests/docs/test_results_pages.py holds to results/NAME/), no page of README.md or docs/ prints

- a number with its interval, `98.2 [95.3, 100.0]`, or with its seeds' values, `0.78 (0.59, 0.97)`: the printed
  form of every mean posbench judges;
- a verdict word in a table row: reproduced, refuted, inconclusive, shown, agrees, seed-dependent, undecided, or
  `differs (+n pts)`, the reference comparison's verdict;
- a "Verdict:" or "Verdicts (...)" label, the form a hand-written verdict paragraph took, or a bold phrase that
  states a verdict (`**refuted for NoPE**`); a bold verdict word alone (`**inconclusive**`) is the word's definition;
- a throughput figure (`12,345 tok/s`, `tokens/s`, `GFLOP/s`, `TFLOP/s`, `steps/s`, `it/s`, `batches/s`): a measured
  speed, which would need committed bench data;
- in docs/, a table cell that is a time or a speed ratio (`0.26 s`, `16 min 8 s`, `1.07x`, `38.2 / 42.1 ms`). The
  README's timing table is outside this one rule: its quickstart row is held to results/quickstart/run.json by
  tests/docs/test_results_pages.py.

Reference tables (the PE list, options, parity tolerances checked by tests, the memory model's computed table, the
judges' calibration on simulated values) carry none of these forms, so they stay where they are. Every relative
link of those pages resolves, so pointers to the pages that moved stay valid."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUM = r"[-+]?\d[\d,]*(?:\.\d+)?%?"
FORMS = {
    "a number with its interval": re.compile(rf"{NUM} \[{NUM}, {NUM}\]"),
    "a number with its seeds' values": re.compile(r"\d\.\d+ \([-+]?\d+\.\d+, [-+]?\d+\.\d+\)"),
    "a verdict label": re.compile(r"\bVerdicts?(?: \(|:)"),
    "a throughput figure": re.compile(r"\d[\d,.]*\s*[kKMG]?\s*(?:tok(?:en)?s?/s|[GT]FLOP/s|steps/s|it/s|batches/s)"),
}
UNIT = r"\s*(?:µs|ms|s|min|h|x)"
TIMING_CELL = re.compile(rf"(?:about |~)?(?:[\d,.]+(?:{UNIT})?\s*(?:/|-|to)\s*)*[\d,.]+{UNIT}(?: \(.*\))?"
                         r"|.*\b\d+ min \d+ s\b.*")
VERDICT_IN_ROW = re.compile(r"\b(?:reproduced|refuted|inconclusive|shown|agrees|seed-dependent|undecided)\b"
                            r"|\bdiffers \(\s*[-+]?\d")
BOLD = re.compile(r"\*\*([^*]+)\*\*")
TERMS = {"reproduced", "not reproduced", "refuted", "inconclusive", "shown", "agrees", "differs", "differs (+n pts)",
         "seed-dependent", "undecided"}  # the verdict words as reading-a-report.md defines them
GENERATED = re.compile(r"<!-- results: \w+ [\w-]+ -->\n.*?\n<!-- /results -->", re.DOTALL)
SEPARATOR = re.compile(r"^\|[-| :]+\|$")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    """README.md and every docs page but the generated ones: docs/results/index.md and one page per results/<name>/
    (tests/docs/test_results_pages.py holds each to its data); any other page under docs/results/ is checked."""
    generated = {ROOT / "docs" / "results" / "index.md"} | {
        ROOT / "docs" / "results" / f"{d.name}.md" for d in (ROOT / "results").iterdir() if d.is_dir()}
    return [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if p not in generated)


def problems(text: str, timings: bool = True) -> list[str]:
    """'line N: what it publishes' for every unbacked result in a page's text (generated blocks left out); with
    `timings`, table cells that are times or speed ratios too."""
    text = GENERATED.sub(lambda m: "\n" * m.group().count("\n"), text)  # keeps line numbers
    found, body = [], False
    for n, line in enumerate(text.splitlines(), 1):
        found += [f"line {n}: {what}" for what, form in FORMS.items() if form.search(line)]
        found += [f"line {n}: a verdict in bold" for span in BOLD.findall(line)
                  if span.lower() not in TERMS and VERDICT_IN_ROW.search(span)]
        if not line.startswith("|"):
            body = False
        elif SEPARATOR.match(line):
            body = True  # the rows after a header's separator are the table's body
        elif body:
            if VERDICT_IN_ROW.search(line):
                found.append(f"line {n}: a verdict in a table row")
            if timings and any(TIMING_CELL.fullmatch(cell.strip()) for cell in line.strip("|").split("|")):
                found.append(f"line {n}: a time in a table row")
    return found


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_outside_docs_results_publishes_a_result(page):
    found = problems(page.read_text())
    assert not found, (
        f"{page.relative_to(ROOT)} publishes results with no data behind them: {found}; "
        "commit the data under results/<name>/ and link its page, or take the result off the page")


@pytest.mark.parametrize("text, what", [
    ("| rope | 98.2 [95.3, 100.0] |", "a number with its interval"),
    ("ALiBi -0.023 [-0.025, -0.021] ppl per doubling", "a number with its interval"),
    ("| rope | 0.78 (0.59, 0.97) |", "a number with its seeds' values"),
    ("Verdicts (paired t tests over 3 seeds): none", "a verdict label"),
    ("Verdict: **no pair is decided**", "a verdict label"),
    ("is **refuted for NoPE** at 2x", "a verdict in bold"),
    ("**every claim is inconclusive on every task**", "a verdict in bold"),
    ("training ran at 594k-633k tokens/s", "a throughput figure"),
    ("| rope | 1,355 tok/s |", "a throughput figure"),
    ("|a|b|\n|---|---|\n| `rope > alibi` | reproduced |", "a verdict in a table row"),
    ("|a|b|\n|---|---|\n| kazemnejad | differs (+3.1 pts) |", "a verdict in a table row"),
    ("|a|b|\n|---|---|\n| cpu-small | 1.05x |", "a time in a table row"),
    ("|a|b|\n|---|---|\n| quickstart | 16 min 8 s |", "a time in a table row"),
    ("|a|b|\n|---|---|\n| torch | 38.2 / 42.1 ms |", "a time in a table row"),
])
def test_each_form_of_an_unbacked_result_is_found(text, what):
    assert [p.split(": ", 1)[1] for p in problems(text)] == [what]


def test_reference_text_and_generated_blocks_pass():
    reference = ("| relation | shown when | refuted when |\n|---|---|---|\n"
                 "| `a > b` | the interval lies above 0 | below |\n"
                 "| `sinusoidal` | scaled table | **differs**: Vaswani et al. scale the embeddings |\n"
                 "A claim is *reproduced* when every relation is shown. Tested at 4x the training length.\n"
                 "- **not reproduced**: one relation is refuted. Else **inconclusive**; **differs (+n pts)**.\n"
                 "| preset | params | GFLOP/token |\n|---|---|---|\n| tiny (512 x 6) | 58.7M | 0.39 |\n"
                 "| PE | length |\n|---|---|\n| alibi | 4x the training length |\n")
    assert problems(reference) == []
    headline = ("<!-- results: quickstart headline -->\n| task | best |\n|---|---|\n"
                "| k_back | rope 98.5 [97.2, 99.7] |\n<!-- /results -->\nafter: 1.0 [0.0, 2.0]")
    assert problems(headline) == ["line 6: a number with its interval"]  # the line after the block is checked


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    heads = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to what is not there: {broken}"
