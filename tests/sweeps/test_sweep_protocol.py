"""The Protocol section at the top of a sweep's report.md, from the planned runs' resolved settings."""

import yaml

from posbench.model.build import build_model
from posbench.sweeps.sweep_report import write_report
from posbench.sweeps.sweep_spec import load_sweep, plan_runs


def test_sweep_report_starts_with_the_protocol(tmp_path):
    """Item 3: a sweep's report.md states its model, each (size, PE)'s parameter count, the optimizer
    and schedule, the evaluation settings, the code and the machine, before its tables."""
    spec = {"name": "t", "sizes": ["nano"], "pes": [{"name": "rope"}, {"name": "alibi"}], "seeds": [0],
            "run": {"model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 64},
                    "data": {"tokenizer": {"name": "bytes"}},
                    "optim": {"lr": 0.002}, "train": {"budget_unit": "tokens", "target_budgets": [16384],
                                                     "global_batch_tokens": 1024, "micro_batch": 16}},
            "eval": {"suites": ["ppl"], "lengths": [32, 64, 128]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    sweep = load_sweep(str(tmp_path / "s.yaml"))
    runs = plan_runs(sweep, tmp_path / "out")
    (tmp_path / "out").mkdir(exist_ok=True)
    report = write_report(sweep, runs, {}, tmp_path / "out", [])
    protocol = report[report.index("## Protocol"):]
    for run in runs:
        n = sum(p.numel() for p in build_model(run.cfg.model, run.cfg.pe, "cpu").parameters())
        assert f"nano/{run.pe} {n:,}" in protocol
    assert "d_model 32, 1 layers, 2 heads" in protocol and "AdamW, peak lr 0.002" in protocol
    assert "lengths [32, 64, 128]" in protocol and "CPU cores" in protocol


def planned(tmp_path, pes: list[str], seeds: list[int], seq_len: int, evaluation: dict):
    """A tiny sweep (1-layer nano, byte tokens) loaded from its file and planned under tmp_path/out, with
    nothing trained: (sweep, runs) for a report from hand-made results."""
    spec = {"name": "t", "sizes": ["nano"], "pes": [{"name": pe} for pe in pes], "seeds": seeds,
            "run": {"model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": seq_len},
                    "data": {"tokenizer": {"name": "bytes"}},
                    "train": {"budget_unit": "tokens", "target_budgets": [16384],
                              "global_batch_tokens": 16 * seq_len, "micro_batch": 16}},
            "eval": evaluation}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    sweep = load_sweep(str(tmp_path / "s.yaml"))
    runs = plan_runs(sweep, tmp_path / "out")
    (tmp_path / "out").mkdir(exist_ok=True)
    return sweep, runs


def test_sweep_perplexity_table_states_the_tokens_scored(tmp_path):
    """Item 8: the sweep report's perplexity section says over how many tokens each length was scored."""
    sweep, runs = planned(tmp_path, ["rope"], [0], 64, {"suites": ["ppl"], "lengths": [64, 128]})
    rows = [{"length": 64, "na": None, "nonoverlap": {"loss": 1.5, "ppl": 4.48, "tokens": 32768}},
            {"length": 128, "na": None, "nonoverlap": {"loss": 1.6, "ppl": 4.95, "tokens": 32768}}]
    results = {runs[0].name: {"suites": {"ppl": {"rows": rows}}}}
    report = write_report(sweep, runs, results, tmp_path / "out", [])
    assert "Tokens scored per length: 64: 32,768, 128: 32,768." in report
