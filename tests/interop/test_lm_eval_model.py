"""lm-evaluation-harness: the `posbench` model type, offline, on local tasks written here.

- a checkpoint built so its answers are known (attention and MLP outputs zero, unit-norm embeddings: it
  predicts "repeat the last token"), through simple_evaluate on a multiple-choice and a generation task:
  accuracy and exact match are 1.0, and every loglikelihood equals posbench's own log-probs;
- a learned table (bounded PE): loglikelihood equal to log-probs computed here, inputs past the table
  truncated from the left with a warning saying so; generate_until equal to posbench's greedy decoding;
- loglikelihood_rolling: exp(-sum ll / n tokens) equals eval.py's non-overlapping perplexity on the same text;
- the command line resolves `--model posbench`.
"""

import json
import logging
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from posbench.config import load_config  # noqa: E402
from posbench.config_loader import dump_yaml  # noqa: E402
from posbench.data.tokenizers import TokenizerConfig, build_tokenizer  # noqa: E402
from posbench.errors import ConfigError  # noqa: E402
from posbench.evaluation.generate import greedy_generate  # noqa: E402
from posbench.evaluation.loading import load_model  # noqa: E402
from posbench.evaluation.ppl_data import TextFiles, build_ppl_data  # noqa: E402
from posbench.evaluation.suites.ppl import NonOverlapping, token_losses  # noqa: E402
from posbench.interop.lm_eval_model import PosbenchLM  # noqa: E402
from posbench.model.build import build_model  # noqa: E402
from posbench.training import checkpoint as ckpt  # noqa: E402

TINY = ["model.d_model=32", "model.n_heads=4", "model.n_layers=2", "model.d_ff=64", "model.seq_len=64",
        "model.vocab_size=300", "data.tokenizer.name=bytes"]
BYTES = build_tokenizer(TokenizerConfig.registry_lookup("bytes")(name="bytes"), ".")


def save_checkpoint(tmp_path: Path, overrides, edit) -> Path:
    cfg = load_config(model_size="nano", overrides=[*TINY, *overrides])
    model = build_model(cfg.model, cfg.pe, "cpu")
    with torch.no_grad():
        edit(model)
    run = tmp_path / "run"
    run.mkdir()
    ckpt.save(run, 0, model.state_dict(), {}, {"step": 0}, dump_yaml(cfg))
    return run


def repeat_last_token(model):
    """Residual branches write nothing, so logits = E . (g * E_x / rms(E_x)) with unit-norm rows E: the
    largest is the last token itself (Cauchy-Schwarz), by a margin of 20 * (1 - cos) nats."""
    for block in model.blocks:
        block.attn.proj.weight.zero_()
        block.mlp.down.weight.zero_()
    g = torch.Generator().manual_seed(0)
    E = torch.randn(model.tok_emb.weight.shape, generator=g)
    model.tok_emb.weight.copy_(E / E.norm(dim=1, keepdim=True))
    model.norm.weight.fill_(20 / math.sqrt(E.shape[1]))


def perturb(model):
    g = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.add_(0.05 * torch.randn(p.shape, generator=g))


def own_loglikelihood(model, context: str, continuation: str, max_length: int) -> float:
    ids = (BYTES.encode(context) + BYTES.encode(continuation))[-(max_length + 1):]
    n = min(len(BYTES.encode(continuation)), len(ids) - 1)
    with torch.no_grad():
        logp = F.log_softmax(model(torch.tensor([ids[:-1]])).logits.float(), dim=-1)[0]
    return float(sum(logp[t, ids[t + 1]] for t in range(len(ids) - 1 - n, len(ids) - 1)))


def write_tasks(folder: Path) -> None:
    mc = [{"context": c, "choices": [c[-1], *others], "gold": 0}
          for c, others in [("positional", ["x", "q"]), ("encoding b", ["c", "d", "e"]), ("abc", ["ab", "zz"]),
                            ("hello w", ["ww!", "q"]), ("n=1234", ["5", "3"])]]
    gen = [{"context": c, "target": c[-1] * 4} for c in ("rotary", "alibi!", "xyz", "t5 bias")]
    (folder / "mc.json").write_text(json.dumps(mc))
    (folder / "gen.json").write_text(json.dumps(gen))
    common = "dataset_path: json\ntest_split: test\ndoc_to_text: \"{{context}}\"\n"
    (folder / "repeat_mc.yaml").write_text(
        f"task: posbench_repeat_mc\n{common}dataset_kwargs:\n  data_files:\n    test: {folder / 'mc.json'}\n"
        "output_type: multiple_choice\ndoc_to_choice: \"{{choices}}\"\ndoc_to_target: \"{{gold}}\"\n"
        "target_delimiter: \"\"\nmetric_list:\n  - metric: acc\n")
    (folder / "repeat_gen.yaml").write_text(
        f"task: posbench_repeat_gen\n{common}dataset_kwargs:\n  data_files:\n    test: {folder / 'gen.json'}\n"
        "output_type: generate_until\ndoc_to_target: \"{{target}}\"\ntarget_delimiter: \"\"\n"
        "generation_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 4\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n")


@pytest.fixture
def known_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    write_tasks(tasks)
    return save_checkpoint(tmp_path, ["pe.name=rope"], repeat_last_token), tasks


def test_simple_evaluate_on_local_tasks_with_known_answers(known_answers):
    from lm_eval.tasks import TaskManager

    run, tasks = known_answers
    out = lm_eval.simple_evaluate(model="posbench", model_args=f"checkpoint={run}", batch_size=3,
                                  tasks=["posbench_repeat_mc", "posbench_repeat_gen"], log_samples=True,
                                  task_manager=TaskManager(include_path=str(tasks)))
    scores = {t: {k: v for k, v in r.items() if not k.endswith("stderr,none")} for t, r in out["results"].items()}
    print("LM_EVAL SCORES", scores)
    assert out["results"]["posbench_repeat_mc"]["acc,none"] == 1.0
    assert out["results"]["posbench_repeat_gen"]["exact_match,none"] == 1.0
    model = load_model(run).model
    samples = out["samples"]["posbench_repeat_mc"]
    assert len(samples) == 5
    for s in samples:
        for choice, (ll, _greedy) in zip(s["doc"]["choices"], [r[0] for r in s["resps"]]):
            assert ll == pytest.approx(own_loglikelihood(model, s["doc"]["context"], choice, 64), abs=1e-4)


def test_command_line_resolves_the_posbench_model(known_answers, tmp_path):
    run, tasks = known_answers
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "posbench.interop.lm_eval_model", "--model", "posbench",
                           "--model_args", f"checkpoint={run}", "--tasks", "posbench_repeat_mc", "--include_path",
                           str(tasks), "--batch_size", "4"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"\|posbench_repeat_mc\|.*\|acc\s*\|[^|]*\|\s*1(\.0+)?\|", proc.stdout), proc.stdout


def request(kind, *args):
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def test_bounded_pe_truncates_from_the_left_and_says_so(tmp_path, caplog):
    run = save_checkpoint(tmp_path, ["pe.name=learned"], perturb)
    lm = PosbenchLM(checkpoint=str(run), batch_size=2)
    model = load_model(run).model
    assert lm.max_length == 64 and lm.pad_ok
    pairs = [("short context", " ok"), ("a" * 30 + "b", "cd"), ("long context" * 12, " beyond the table"),
             ("x", "y" * 5)]
    with caplog.at_level(logging.WARNING, logger="posbench.lm_eval"):
        got = lm.loglikelihood([request("loglikelihood", c, x) for c, x in pairs])
    assert "1 of 4 loglikelihood inputs were longer than 64 tokens (PE `learned` is defined for positions 0..63): " \
           "truncated from the left to their last 64 tokens" in caplog.text
    for (c, x), (ll, _) in zip(pairs, got):
        assert ll == pytest.approx(own_loglikelihood(model, c, x, 64), abs=1e-4)
    prompts = ["positional encodings", "abc"]
    texts = lm.generate_until([request("generate_until", p, {"until": ["\x00never"], "max_gen_toks": 8})
                               for p in prompts])
    want = greedy_generate(model, [BYTES.encode(p) for p in prompts], [8, 8], torch.device("cpu"))
    assert texts == [BYTES.decode([t for t in w if t < BYTES.encoding.n_vocab]) for w in want]


@pytest.mark.parametrize("pe", ["rope", "alibi", "randomized"])
def test_rolling_loglikelihood_is_eval_perplexity(tmp_path, pe):
    run = save_checkpoint(tmp_path, [f"pe.name={pe}"], perturb)
    text = ("Positional encodings tell a transformer where each token is. " * 4)[:3 * 64]
    (tmp_path / "doc.txt").write_text(text)
    lm = PosbenchLM(checkpoint=str(run), batch_size=2, max_length=64)  # the window eval.py is asked for below
    (total,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", text)])
    harness_ppl = math.exp(-total / len(BYTES.encode(text)))
    # eval.py's non-overlapping protocol at L = 64 on the same text, through its data source and scorer
    loaded = load_model(run)
    data = build_ppl_data(TextFiles.Config(paths=[str(tmp_path / "doc.txt")]), loaded.cfg, BYTES)
    stream = torch.from_numpy(data.tokens(3 * 64 + 1).astype("int64"))
    starts, _ = NonOverlapping(0).windows(64, 3 * 64, len(stream))
    assert len(starts) == 3
    win = torch.stack([stream[s:s + 65] for s in starts])
    with torch.no_grad():
        loss = token_losses(loaded.model, win[:, :-1], win[:, 1:]).double().mean().item()
    assert harness_ppl == pytest.approx(math.exp(loss), rel=1e-5)


# -- the guide's offline commands (docs/guide.md, "Use a checkpoint elsewhere") ----------------------------------
ROOT = Path(__file__).resolve().parents[2]
PASSAGES = ["the river ran under the old bridge near the garden river", "she wrote a letter to her brother letter",
            "a a a a a a", "number theory is the theory of number", "his city was by the river city"]


def readme_command(marker: str) -> str:
    """The docs/guide.md line that starts with `marker`, its continuation lines joined."""
    text = (ROOT / "docs" / "guide.md").read_text()
    start = text.index(marker)
    lines = []
    for line in text[start:].splitlines():
        lines.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            return " ".join(lines)
    raise AssertionError(f"docs/guide.md: {marker!r} never ends")


@pytest.fixture
def readme_dir(tmp_path):
    """A scratch repository root: configs/ linked from the checkout, a `posbench` on PATH that is this
    interpreter's `python -m posbench`, the repeat-last-token model at checkpoints/RUN."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "posbench").write_text(f"#!/bin/sh\nexec {sys.executable} -m posbench \"$@\"\n")
    (bin_dir / "posbench").chmod(0o755)
    work = tmp_path / "repo"
    work.mkdir()
    (work / "configs").symlink_to(ROOT / "configs")
    (work / "checkpoints").mkdir()
    save_checkpoint(tmp_path, ["pe.name=rope"], repeat_last_token).rename(work / "checkpoints" / "RUN")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_DATASETS_OFFLINE", None)
    return work, env


def test_readme_offline_lambada_scores_the_download_eval_cache(readme_dir):
    """`posbench data download-eval lambada` (from the loopback hub here) then the guide's offline lm-eval
    command, verbatim: the scores land in a folder named after the checkpoint and equal eval.py's LAMBADA suite
    on the same file (the harness's acc and perplexity, computed by posbench)."""
    from posbench.cli.data import main as data_main
    from posbench.evaluation.eval_sets import prepared_files
    from posbench.evaluation.suites.lambada import Lambada, LambadaConfig
    from tests.data.data_helpers import FakeHub
    from tests.evaluation.helpers import session_for, target_for

    work, env = readme_dir
    with FakeHub({}, repo="posbench-tests/unused") as hub:
        hub.add_repo("EleutherAI/lambada_openai", {
            "data/lambada_test_en.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in PASSAGES).encode()})
        download = readme_command("posbench data download-eval lambada").split("#")[0].split()
        assert download == ["posbench", "data", "download-eval", "lambada"]
        assert data_main([*download[2:], "--root", str(work / "data"), "--endpoint", hub.url]) == 0
    command = readme_command("HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 posbench lm-eval")
    proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out,) = (work / "runs" / "lm_eval" / "checkpoints__RUN").glob("results_*.json")
    scores = json.loads(out.read_text())["results"]["lambada_local"]
    loaded = load_model(work / "checkpoints" / "RUN")
    (cached,) = prepared_files("lambada", work / "data")
    own = Lambada(LambadaConfig(path=str(cached)), target_for(loaded.cfg, [64], batch_size=2)).run(
        session_for(loaded.model))
    assert scores["acc,none"] == pytest.approx(own["accuracy"])  # 0 here: a space after the last letter
    assert scores["perplexity,none"] == pytest.approx(own["ppl"], rel=1e-4)


def test_a_hub_task_offline_is_one_line_naming_the_local_task(readme_dir):
    work, env = readme_dir
    env = {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(["posbench", "lm-eval", "--model", "posbench", "--model_args", "pretrained=checkpoints/RUN",
                           "--tasks", "lambada_openai"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith("error: lm_eval: a task's dataset `EleutherAI/lambada_openai` is on the Hugging Face Hub")
    assert "(HF_HUB_OFFLINE and HF_DATASETS_OFFLINE set)" in last
    assert "`--include_path configs/lm_eval --tasks lambada_local`" in last


def test_pretrained_is_the_checkpoint_and_one_is_needed(tmp_path):
    run = save_checkpoint(tmp_path, ["pe.name=rope"], repeat_last_token)
    assert PosbenchLM(pretrained=str(run)).max_length == 64
    with pytest.raises(ConfigError, match="differ"):
        PosbenchLM(checkpoint=str(run), pretrained=str(tmp_path))
    with pytest.raises(ConfigError, match="pretrained=checkpoints/RUN"):
        PosbenchLM()


def test_the_command_loads_the_checkpoint_once_before_the_harness(tmp_path, monkeypatch):
    """`posbench lm-eval` reads --model_args with the harness's own action (both of its forms), loads the checkpoint
    before the harness indexes its tasks (so a damaged one is refused first: tests/cli/test_exit_codes.py), and
    the model the harness then builds takes that load instead of reading the files again."""
    import posbench.evaluation.loading as loading
    from posbench.cli.lm_eval import harness_model_args
    from posbench.interop import lm_eval_model

    run = save_checkpoint(tmp_path, ["pe.name=rope"], repeat_last_token)
    line = ["--model", "posbench", "--tasks", "x", "--device", "cpu", "--model_args"]
    assert harness_model_args([*line, f"pretrained={run},max_length=32"]) == \
        ("posbench", {"pretrained": str(run), "max_length": 32}, "cpu")
    assert harness_model_args([*line, json.dumps({"checkpoint": str(run)})])[1] == {"checkpoint": str(run)}
    assert harness_model_args(["--tasks", "x"]) == (None, {}, None)
    real, calls = loading.load_model, []
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: calls.append(a) or real(*a, **k))
    lm_eval_model.preload({"pretrained": str(run)}, None)
    lm = PosbenchLM(pretrained=str(run), device="cpu")
    assert len(calls) == 1 and not lm_eval_model._PRELOADED and lm.max_length == 64
    PosbenchLM(checkpoint=str(run))  # nothing preloaded now: it loads its own
    assert len(calls) == 2
    with pytest.raises(ConfigError, match="differ"):
        lm_eval_model.preload({"pretrained": str(run), "checkpoint": str(tmp_path)}, "cpu")
