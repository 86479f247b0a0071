"""eval.py end to end on nano checkpoints trained here on CPU: results.json, the markdown and the plots,
for one checkpoint and for a comparison of two; every error names its path before any work is done."""

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posbench.cli.eval import main_eval
from tests.evaluation.helpers import nano_checkpoint, write_text

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"
SMALL = ["--set", "ppl.max_tokens=512", "--set", "algorithmic.n_examples=2", "--set", "algorithmic.shots=[0,1]",
         "--set", "passkey.n_samples=1", "--set", "niah.n_samples=1", "--set", "passkey.depths=[0.0,1.0]",
         "--set", "niah.depths=[0.0,0.5,1.0]", "--set", "long_context.n_samples=1",
         "--set", "long_context.depths=[0.5]",
         "--tasks", "reverse,sort", "--device", "cpu", "--no-progress"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    text = write_text(root / "held_out.txt", n_words=1000)
    return {"rope": nano_checkpoint(root, "rope"), "learned": nano_checkpoint(root, "learned"), "text": text,
            "root": root}


def strict_json(path: Path) -> dict:
    def no_nan(name):
        raise AssertionError(f"{path} contains {name}")
    return json.loads(path.read_text(), parse_constant=no_nan)


def test_eval_py_compares_two_checkpoints(runs, tmp_path):
    out = tmp_path / "cmp"
    cmd = [sys.executable, "eval.py", str(runs["rope"]), str(runs["learned"] / "latest"), "--suite", "all",
           "--lengths", "64,128,512", "--ppl-text", str(runs["text"]), "--out", str(out), *SMALL]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    for label in ("rope", "learned"):
        res = strict_json(out / label / "results.json")
        assert res["checkpoint"].endswith("step_00000004") and res["step"] == 4
        assert res["config"]["pe"]["name"] == label and res["config"]["data"]["tokenizer"]["name"] == "bytes"
        assert res["code_version"].startswith(("git ", "posbench ")) and res["lengths"] == [64, 128, 512]
        assert set(res["suites"]) == {"ppl", "algorithmic", "passkey", "niah", "long_context"}
        assert (out / label / "summary.md").read_text().startswith(f"# Evaluation of {label}")
        for png in ("ppl_vs_length", "algorithmic_id_ood", "passkey_heatmap", "niah_heatmap"):
            assert (out / label / f"{png}.png").read_bytes()[:8] == PNG
    rope, learned = (strict_json(out / k / "results.json")["suites"] for k in ("rope", "learned"))
    # rope is defined at every length; the learned table (64 positions) is not: n/a, not an error or a number
    for row in rope["ppl"]["rows"]:
        assert 1 < row["nonoverlap"]["ppl"] < 2 * 512 and row["sliding"]["ppl"] > 1
    ppl_learned = {r["length"]: r for r in learned["ppl"]["rows"]}
    assert ppl_learned[64]["nonoverlap"]["ppl"] > 1
    assert ppl_learned[128]["nonoverlap"] is None and ppl_learned[512]["sliding"] is None
    assert learned["niah"]["by_length"]["512"] is None and rope["niah"]["by_length"]["512"] is not None
    assert {c["shots"] for c in rope["algorithmic"]["cells"]} == {0, 1}

    summary = (out / "summary.md").read_text()
    assert "| length | rope | learned |" in summary and "n/a" in summary
    # the comparison gives every n/a its reason too, not only each checkpoint's own summary
    assert "- learned 512: n/a, the PE represents at most 64 positions" in summary  # passkey / niah
    assert "- learned 128: n/a, " in summary  # perplexity beyond the learned table
    assert "- learned: prompt short (the full prompt's question and answer take" in summary
    for png in ("ppl_vs_length", "loss_vs_position", "algorithmic_id_ood", "passkey_heatmap", "niah_heatmap"):
        assert (out / f"{png}.png").read_bytes()[:8] == PNG, png
        assert (out / f"{png}.pdf").read_bytes()[:5] == b"%PDF-", png  # the same figure for a paper
        assert f"({png}.png)" in summary


def test_long_context_suite_writes_effective_length_and_heatmaps(runs, tmp_path):
    out = tmp_path / "lc"
    assert main_eval([str(runs["learned"]), "--suite", "long_context", "--lengths", "64,128", "--out", str(out),
                      *SMALL]) == 0
    res = strict_json(out / "results.json")["suites"]["long_context"]
    assert set(res["families"]) == {"niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery",
                                    "variable_tracking", "common_words", "frequent_words", "kv_retrieval"}
    kv = res["families"]["kv_retrieval"]
    assert kv["by_length"]["128"] is None and kv["effective"]["limit"] in (None, "128 tokens is n/a: the PE "
                                                                          "represents at most 64 positions")
    summary = (out / "summary.md").read_text()
    assert "| family | effective length | ID score | ID length | limited by |" in summary
    for name in res["families"]:
        assert (out / f"long_context_{name}_heatmap.png").read_bytes()[:8] == PNG
        assert f"(long_context_{name}_heatmap.png)" in summary


def test_one_checkpoint_defaults_to_its_eval_dir_and_records_rope_scaling(runs):
    args = [str(runs["rope"]), "--suite", "ppl", "--lengths", "64,256", "--ppl-text", str(runs["text"]),
            "--rope-scaling", "yarn", "--rope-factor", "4", *SMALL]
    assert main_eval(args) == 0
    out = runs["rope"] / "eval" / (runs["rope"] / "latest").resolve().name  # outside the step dir
    assert not (runs["rope"] / "latest" / "eval").exists()
    res = strict_json(out / "results.json")
    assert res["rope_scaling"] == {"name": "yarn", "factor": 4.0, "original_max_positions": None,
                                   "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}
    assert res["rope_scaling_as_trained"] == [{"pe": "rope", "name": "none", "factor": 1.0}]
    assert list(res["suites"]) == ["ppl"]
    assert "RoPE scaling at evaluation: yarn x4" in (out / "summary.md").read_text()


def test_dope_records_the_heads_it_chose_at_each_length(runs):
    # the payload results.json is written from (eval_runner.evaluate), without the report's plots
    from posbench.cli.eval import flag_overrides, parser
    from posbench.evaluation.eval_config import load_eval_config
    from posbench.evaluation.eval_runner import evaluate, plan

    args = parser().parse_args([str(runs["rope"]), "--suite", "ppl,niah", "--lengths", "32,128", "--ppl-text",
                                str(runs["text"]), "--dope", "--rope-scaling", "dynamic", *SMALL])
    cfg = load_eval_config([], flag_overrides(args) + args.set + ["dope.n_calibration=2", "ppl.max_windows=1",
                                                                 "ppl.protocols=[nonoverlap]", "niah.depths=[0.5]"])
    (planned,) = plan(args.checkpoints, cfg, torch.device("cpu"))
    res = json.loads(json.dumps(evaluate(planned, cfg, torch.device("cpu"))))
    assert res["dope"]["n_heads"] == 3 and res["dope"]["mode"] == {"name": "gaussian", "sigma": 1.0, "seed": 42}
    # the needle's short prompt does not fit 32 tokens (n/a there, nothing to calibrate or score): 128 only
    assert [(r["suite"], r["length"]) for r in res["dope_heads"]] == [("ppl", 32), ("ppl", 128), ("niah", 128)]
    for record in res["dope_heads"]:
        flat = sorted(s for row in record["scores"] for s in row)
        assert len(flat) == 8 and [h["score"] for h in record["heads"]] == flat[:3]  # the 3 lowest, ascending
        assert all(record["scores"][h["layer"]][h["head"]] == h["score"] for h in record["heads"])
    assert all(row["nonoverlap"]["ppl"] > 1 for row in res["suites"]["ppl"]["rows"])
    from posbench.evaluation.eval_report import dope_line

    first = res["dope_heads"][0]["heads"][0]
    line = dope_line(res)
    assert line.startswith("- DoPE at evaluation (posbench's reading, docs/pe_defaults.md): gaussian on the 3 lowest")
    assert f"ppl 32: L{first['layer']}H{first['head']}, " in line and dope_line({}) == "- DoPE at evaluation: none"


def test_in_distribution_cells_stay_inside_the_training_length(runs, tmp_path):
    """A 64-token nano with eval.py's defaults (lengths 0.5x..8x, 0 and 3 shots): every ID prompt asked fits in
    64 tokens with its answer, the ID cells that cannot fit are n/a with their reason, and passkey and needle
    have a measured cell at the training length (the short prompt); the summary says why each n/a is one."""
    out = tmp_path / "id"
    assert main_eval([str(runs["rope"]), "--suite", "algorithmic,passkey,niah", "--tasks", "sort,no_carry_add,passkey",
                      "--set", "algorithmic.n_examples=3", "--set", "algorithmic.splits=[id]", "--set",
                      "passkey.n_samples=1", "--set", "niah.n_samples=1", "--set", "passkey.depths=[0.5]", "--set",
                      "niah.depths=[0.5]", "--out", str(out), "--device", "cpu", "--no-progress"]) == 0
    res = strict_json(out / "results.json")
    assert res["lengths"] == [32, 64, 128, 256, 512]
    cells = {(c["task"], c["shots"]): c for c in res["suites"]["algorithmic"]["cells"]}
    for c in cells.values():
        assert (c["na"] is None and c["tokens_max"] <= 64) or (c["accuracy"] is None and c["na"]), c
    assert cells[("no_carry_add", 0)]["accuracy"] is not None
    assert cells[("passkey", 0)]["na"].startswith("not in distribution: 3 of 3 queries")
    passkey, niah = res["suites"]["passkey"], res["suites"]["niah"]
    assert passkey["prompt"] == "short" and passkey["by_length"]["64"] is not None
    # the short needle (a city and a 7-digit number) needs ~75 bytes: more than 64, said so (nano's 128 holds it)
    assert niah["prompt"] == "short" and "cannot hold the short prompt's question and answer" in \
        next(c["na"] for c in niah["cells"] if c["length"] == 64)
    summary = (out / "summary.md").read_text()
    assert "- passkey ID 0-shot: n/a, not in distribution" in summary
    assert "no answer token of the cell lies past the training length" in summary  # the footnote names every reason


@pytest.mark.parametrize("case,code,message", [  # 4: a bad checkpoint, as in every command; 2: bad input
    ("missing", 4, "no such checkpoint"),
    ("corrupt", 4, "model.pt: cannot be read as model weights"),
    ("config", 4, "config.yaml"),
    ("rope_on_learned", 2, "needs a rotary PE"),
    ("suite", 2, "unknown suite `pkey` (did you mean `passkey`?)"),
    ("key", 2, "unknown config key `ppl.strides`"),
    ("dope_on_learned", 2, "--dope denoises rotary position embeddings and this model's PE is `learned`"),
    ("dope_suite", 2, "--dope calibrates on each suite's own data at each length, which suite(s) algorithmic do"),
    ("dope_heads", 2, "dope.n_heads=9 but the model has 2 layers x 4 heads = 8"),
])
def test_errors_name_the_problem_before_any_work(runs, tmp_path, capsys, case, code, message):
    bad = tmp_path / "bad_run"
    if case in ("corrupt", "config"):
        shutil.copytree(runs["rope"] / "latest", bad)
        target = bad / ("model.pt" if case == "corrupt" else "config.yaml")
        target.write_bytes(target.read_bytes()[: 200] if case == "corrupt" else b"model: {d_model: [}")
    args = {"missing": [str(runs["rope"]), str(tmp_path / "nope")], "corrupt": [str(runs["rope"]), str(bad)],
            "config": [str(runs["rope"]), str(bad)], "rope_on_learned": [str(runs["rope"]), str(runs["learned"]),
                                                                         "--rope-scaling", "pi", "--rope-factor", "2"],
            "suite": [str(runs["rope"]), "--suite", "ppl,pkey"], "key": [str(runs["rope"]), "--set", "ppl.strides=3"],
            "dope_on_learned": [str(runs["rope"]), str(runs["learned"]), "--dope", "--suite", "ppl"],
            "dope_suite": [str(runs["rope"]), "--dope", "--suite", "ppl,algorithmic"],
            "dope_heads": [str(runs["rope"]), "--dope", "--suite", "ppl", "--set", "dope.n_heads=9"]}
    out = tmp_path / "out"
    assert main_eval([*args[case], "--out", str(out), "--ppl-text", str(runs["text"]), "--no-progress"]) == code
    err = capsys.readouterr().err
    assert message in err
    if case in ("missing", "corrupt", "config"):
        assert str(tmp_path) in err  # names the offending path
    assert not out.exists()  # the valid first checkpoint was not evaluated either


def test_a_retrained_tokenizer_is_refused_unless_allowed(tmp_path, capsys):
    """A tokenizer retrained in place is noticed: a checkpoint trained on BPE-300 of corpus A, then the BPE
    retrained in place on corpus B: the same text becomes other ids, so eval.py refuses (naming both
    fingerprints) unless told."""
    from posbench.cli.data import main as data_main
    from posbench.config import load_config
    from posbench.data.layout import DataLayout
    from posbench.data.tokenize_shards import tokenize
    from posbench.training.batch_sources import build_stream
    from posbench.training.loop import train

    corpus = tmp_path / "corpus"
    corpus.mkdir()

    def write_corpus(seed: int, words: list[str]) -> None:
        rng = random.Random(seed)
        for f in range(3):
            lines = [json.dumps({"text": " ".join(rng.choice(words) for _ in range(80))}) for _ in range(60)]
            (corpus / f"part{f}.jsonl").write_text("\n".join(lines) + "\n")

    write_corpus(0, "the of and to in is was for on that with as by at from it an be this are".split())
    data = {"source": {"name": "local", "paths": [f"{corpus}/*.jsonl"], "tag": "t"}, "root": str(tmp_path / "data"),
            "tokenizer": {"name": "bpe", "vocab_size": 300}, "mix": {"ratio": 0.0},
            "splits": {"val": {"start": 0, "stop": 1}, "filler": {"start": 1, "stop": 2},
                       "train": {"start": 2, "stop": None}}}
    overrides = [f"data={json.dumps(data)}", "model.seq_len=64", "model.vocab_size=512", "train.stream=shards",
                 "train.budget_unit=tokens", "train.target_budgets=[1024]", "train.global_batch_tokens=512",
                 "train.micro_batch=4", "train.eval_interval=0", "logging.wandb=disabled",
                 "schedule.warmup_tokens=512", f"train.out_dir={tmp_path / 'runs'}", "train.run_name=bpe"]
    cfg = load_config(model_size="nano", overrides=overrides)
    tokenize(cfg.data, log=lambda *_: None)
    trained_with = DataLayout.from_config(cfg.data).tokenizer.build().fingerprint
    run = Path(train(cfg, build_stream(cfg))["run_dir"])
    assert json.loads((run / "latest" / "meta.json").read_text())["tokenizer_fingerprint"] == trained_with
    text = write_text(tmp_path / "held_out.txt", n_words=400)
    args = [str(run), "--suite", "ppl", "--ppl-text", str(text), "--set", "ppl.max_tokens=256", "--device", "cpu",
            "--no-progress"]
    assert main_eval([*args, "--out", str(tmp_path / "before")]) == 0

    write_corpus(1, "zebra quantum yellow xylophone vivid umbrella tundra sphinx rhythm quartz".split())
    data_file = tmp_path / "data.yaml"
    data_file.write_text(json.dumps({"data": data}))
    assert data_main(["train-tokenizer", str(data_file), "--force"]) == 0
    now = DataLayout.from_config(cfg.data).tokenizer.build().fingerprint
    assert now != trained_with
    capsys.readouterr()
    assert main_eval([*args, "--out", str(tmp_path / "after")]) == 2
    err = capsys.readouterr().err
    assert f"trained with tokenizer {trained_with[:16]}" in err and now[:16] in err
    assert "--allow-tokenizer-mismatch" in err and not (tmp_path / "after").exists()
    assert main_eval([*args, "--out", str(tmp_path / "allowed"), "--allow-tokenizer-mismatch"]) == 0


def test_an_encoder_decoder_checkpoint_is_refused_with_the_reason(tmp_path, capsys):
    from posbench.config import load_config
    from posbench.model.build import build_model
    from posbench.training import checkpoint as ckpt

    cfg = load_config(model_size="nano", pe_type="none", overrides=[
        "model.arch.name=encoder_decoder", "model.arch.source_end=3", "data.tokenizer.name=bytes",
        "model.vocab_size=512"])
    model = build_model(cfg.model, cfg.pe)
    ckpt.save(tmp_path / "encdec", 1, model.state_dict(), {"state": {}, "param_groups": []},
              {"step": 1, "tokens": 0}, cfg.to_yaml())
    text = write_text(tmp_path / "text.txt")
    assert main_eval([str(tmp_path / "encdec"), "--ppl-text", str(text), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "eval.py scores language models; this checkpoint's model.arch is `encoder_decoder`" in err
    assert "the study runner scores it" in err and not (tmp_path / "encdec" / "eval").exists()


def test_limit_asks_the_first_n_items_of_every_suite_cell(runs, tmp_path, capsys):
    """`--suite all` on a nano model at 3 lengths asks ~6,700 items; `--limit N` (lm-eval's flag) caps every
    suite's cells at their first N items, and --help names every suite the registry holds."""
    from posbench.cli.eval import parser
    from posbench.evaluation.suites import SUITES

    text = " ".join(parser().format_help().split())
    assert "--limit N" in text and all(name in text for name in SUITES)  # long_context was missing
    assert all(getattr(SUITES[n].options(), SUITES[n].per_cell) is not None for n in SUITES)
    out = tmp_path / "limited"
    assert main_eval([str(runs["rope"]), "--suite", "all", "--lengths", "32,64", "--ppl-text", str(runs["text"]),
                      "--limit", "1", "--out", str(out), "--tasks", "reverse", "--device", "cpu",
                      "--no-progress"]) == 0
    res = strict_json(out / "results.json")
    suites = res["suites"]
    assert res["eval_config"]["limit"] == 1 and set(suites) == {"ppl", "algorithmic", "passkey", "niah",
                                                               "long_context"}
    assert all(row[p]["windows"] == 1 for row in suites["ppl"]["rows"] for p in suites["ppl"]["protocols"]
               if row.get(p))
    assert suites["algorithmic"]["n_examples"] == 1 and all(c["n"] == 1 for c in suites["algorithmic"]["cells"])
    assert suites["passkey"]["n_samples"] == suites["niah"]["n_samples"] == suites["long_context"]["n_samples"] == 1
    with pytest.raises(SystemExit):
        main_eval(["x", "--limit", "0"])
    assert "argument --limit: 0 must be >= 1" in capsys.readouterr().err
