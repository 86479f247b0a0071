"""The Protocol section at the top of an eval report (summary.md), from the checkpoint's resolved settings."""

from posbench.cli.eval import main_eval
from posbench.evaluation.loading import load_model
from tests.evaluation.helpers import nano_checkpoint, write_text


def test_eval_summary_starts_with_the_protocol(tmp_path):
    """Item 3: summary.md states, before any suite's table, the model, its parameter count, the
    optimizer and schedule it trained with, the lengths scored, the code version and the machine."""
    run = nano_checkpoint(tmp_path, "rope")
    text = write_text(tmp_path / "held_out.txt", n_words=1000)
    out = tmp_path / "ev"
    assert main_eval([str(run), "--suite", "ppl", "--lengths", "64,128", "--ppl-text", str(text), "--set",
                      "ppl.max_tokens=512", "--device", "cpu", "--no-progress", "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert summary.index("## Protocol") < summary.index("## Perplexity")
    protocol = summary[summary.index("## Protocol"):summary.index("## Perplexity")]
    loaded = load_model(run)
    assert f"rope {sum(p.numel() for p in loaded.model.parameters()):,}" in protocol
    assert f"d_model {loaded.cfg.model.d_model}, {loaded.cfg.model.n_layers} layers" in protocol
    assert f"AdamW, peak lr {loaded.cfg.optim.lr:g}" in protocol
    assert "evaluated at 64, 128 tokens" in protocol
    assert "CPU cores" in protocol and ("commit " in protocol or "no git checkout" in protocol)
