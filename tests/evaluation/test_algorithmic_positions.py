"""The algorithmic suite asks a checkpoint that trained with its mix's position ids the way its pretraining
documents carried them: an abacus checkpoint trained on bytes shards mixing `addition` (digit places) and
`simple_copy` (no ids) gets, for a 0-shot and a 1-shot addition prompt, <|bos|> 0, each demonstration's and the
query's digit places, the separator 0, and its generated answer tokens' places; simple_copy prompts and answers
get 0 throughout; a rope checkpoint on the same shards gets no ids at all. References: `hand_places` (a digit's
place is its index in its run of digits plus one, tests/data/test_tokenize_positions.py) over the prompt's text,
and the shards' own ids of a task document for the answer rule."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from posbench.config import load_config
from posbench.data.layout import DataLayout
from posbench.data.shards import open_positions, open_shard
from posbench.data.tasks import build_task
from posbench.data.tokenize_shards import tokenize
from posbench.evaluation import data_ids
from posbench.evaluation.eval_config import load_eval_config
from posbench.evaluation.eval_runner import run_eval
from posbench.evaluation.loading import load_model
from posbench.evaluation.suites.algorithmic import DEMO_OFFSET, Algorithmic, AlgorithmicConfig
from posbench.model.transformer import Transformer
from posbench.pe.abacus import Abacus
from posbench.training.batch_sources import build_stream
from posbench.training.loop import train
from tests.data.test_tokenize_positions import ADDITION, BOS_ID, hand_places, jsonl_corpus, overrides
from tests.evaluation.helpers import BYTES, session_for, target_for

COPY = "{name: simple_copy, id_range: [1, 2], ood_range: [3, 4]}"
SEED = 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("algorithmic_positions")
    jsonl_corpus(tmp / "corpus", docs=40)
    out = {}
    for pe, pe_args in (("abacus", ["pe.name=abacus", "pe.max_offset=4"]), ("rope", ["pe.name=rope"])):
        args = [o for o in overrides(tmp, f"train.run_name={pe}") if not o.startswith(("pe.", "data.mix="))]
        args += [*pe_args, f"data.mix={{tasks: [{ADDITION}, {COPY}], ratio: 0.3}}"]
        cfg = load_config(overrides=args).resolve()
        if pe == "abacus":
            tokenize(cfg.data, log=lambda *_: None)
        out[pe] = Path(train(cfg, build_stream(cfg))["run_dir"])
    out["cfg"] = cfg
    return out


class Forced(nn.Module):
    """The real model, run as usual (so its PE reads the ids it is given), with its logits replaced by a one-hot
    on the reference answer's next token: greedy decoding then generates exactly `answer`, whose tokens' ids are
    what the test checks."""

    def __init__(self, model, answer: list[int]):
        super().__init__()
        self.model, self.answer, self.step = model, answer, 0

    def new_cache(self):
        return self.model.new_cache()

    def positions(self, T, device, offset=0):
        return self.model.positions(T, device, offset)

    def forward(self, idx_BT, cache=None, **kw):
        out = self.model(idx_BT, cache=cache, **kw)
        logits = torch.full_like(out.logits, -1e4)
        logits[:, -1, self.answer[self.step]] = 0.0
        self.step += 1
        return SimpleNamespace(logits=logits)


def record(monkeypatch) -> list[torch.Tensor]:
    seen = []
    original = Abacus.data_positions
    monkeypatch.setattr(Abacus, "data_positions",
                        lambda self, d, p: seen.append(d.cpu().clone()) or original(self, d, p))
    return seen


def ask(run_dir: Path, task_cfg, shots: int, split: str, monkeypatch) -> tuple[list[list[int]], dict, list[int]]:
    """One prompt (query 0) of `task_cfg` with `shots` demonstrations through the suite, the model forced to
    generate the reference answer: the ids the PE read at each call, the result, and the prompt's tokens."""
    loaded = load_model(run_dir)
    ev = Algorithmic(AlgorithmicConfig(tasks=[task_cfg], splits=[split], shots=[shots], n_examples=1),
                     target_for(loaded.cfg, [32], seed=SEED))
    query = ev.tasks[0].example(SEED, 0, split)
    tokens = []
    original = Transformer.hidden
    monkeypatch.setattr(Transformer, "hidden",
                        lambda self, x, *a, **kw: tokens.append(x[0].tolist()) or original(self, x, *a, **kw))
    seen = record(monkeypatch)
    res = ev.run(session_for(Forced(loaded.model, BYTES.encode(query.answer))))
    return [s[0].long().tolist() for s in seen], res, tokens[0]


def test_addition_prompts_and_answers_get_the_places_their_documents_carried(runs, monkeypatch):
    addition = runs["cfg"].data.mix.tasks[0]
    task = build_task(addition)
    query = task.example(SEED, 0, "id")
    answer = BYTES.encode(query.answer)
    assert query.answer.startswith(" ") and len(answer) >= 2

    seen, res, prompt = ask(runs["abacus"], addition, 0, "id", monkeypatch)
    assert prompt == [BOS_ID, *BYTES.encode(query.prompt)]
    text = query.prompt + query.answer
    places = hand_places(text)
    # the prompt at once, then every generated token but the last (which is never fed back), one by one
    assert seen == [[0, *places[:len(query.prompt)]], *([p] for p in places[len(query.prompt):len(text) - 1])]
    assert any(seen[0]) and seen[1] == [0]  # digit places, then the answer's space: 0
    (cell,) = res["cells"]
    assert cell["accuracy"] == 1.0 and res["positions"] == data_ids.TASK_IDS

    seen, res, prompt = ask(runs["abacus"], addition, 1, "id", monkeypatch)
    demo = task.example(SEED, DEMO_OFFSET, "train")
    assert prompt == [BOS_ID, *BYTES.encode(demo.text + "\n" + query.prompt)]
    places = hand_places(demo.text + "\n" + text)
    assert seen == [[0, *places[:len(demo.text) + 1 + len(query.prompt)]],
                    *([p] for p in places[len(demo.text) + 1 + len(query.prompt):-1])]
    assert res["cells"][0]["accuracy"] == 1.0


def test_a_task_without_ids_gets_the_text_id_throughout(runs, monkeypatch):
    copy = runs["cfg"].data.mix.tasks[1]
    seen, res, prompt = ask(runs["abacus"], copy, 1, "ood", monkeypatch)
    assert len(seen[0]) == len(prompt) > 32  # past abacus's default positions: the ids carry it
    assert all(not any(s) for s in seen) and len(seen) == len(BYTES.encode(build_task(copy).example(
        SEED, 0, "ood").answer))
    assert res["positions"] == data_ids.TASK_IDS and res["cells"][0]["accuracy"] == 1.0


def test_the_answer_rule_gives_what_the_shards_hold(runs):
    """A train shard's first addition document: its tokens after the '=' run through the rule as if generated
    give exactly the ids the tokenize stage wrote beside them; a stray byte or an id past the tokenizer gets 0."""
    cfg = runs["cfg"]
    layout = DataLayout.from_config(cfg.data)
    path = sorted(layout.tokens_dir.glob("train_*.bin"))[0]
    header, tokens = open_shard(path)
    pos = np.asarray(open_positions(path, header))
    tokens = np.asarray(tokens)
    starts = np.append(np.flatnonzero(tokens == BOS_ID), len(tokens))
    docs = [(tokens[a + 1:b].tolist(), pos[a + 1:b].tolist()) for a, b in zip(starts[:-1], starts[1:])]
    ids, places = next((t, p) for t, p in docs if b"+" in bytes(t) and b"Doc" not in bytes(t))
    eq = ids.index(ord("="))
    rule = data_ids.task_answer_rule(BYTES, build_task(cfg.data.mix.tasks[0]))
    assert rule(ids[eq + 1:]) == places[eq + 1:] and any(places[eq + 1:])
    # answer_positions counts the answer digits so far: the 4 is the second, whatever stray byte stands between
    assert rule(BYTES.encode(" 7x4") + [300]) == [0, 1, 0, 2, 0]


def test_a_rope_checkpoint_gets_no_ids(runs, tmp_path, monkeypatch):
    kwargs = []
    original = Transformer.hidden
    monkeypatch.setattr(Transformer, "hidden",
                        lambda self, x, *a, **kw: kwargs.append(kw) or original(self, x, *a, **kw))
    cfg = load_eval_config(overrides=["suites=[algorithmic]", "lengths=[32]", "device=cpu", "progress=false",
                                      "algorithmic.n_examples=2", "algorithmic.shots=[0, 1]"])
    run_eval([str(runs["rope"])], cfg, tmp_path / "ev", log=lambda *_: None)
    res = json.loads((tmp_path / "ev" / "results.json").read_text())["suites"]["algorithmic"]
    assert res["positions"] == data_ids.OWN and {c["task"] for c in res["cells"]} == {"addition", "simple_copy"}
    assert kwargs and all("data_pos_BT" not in kw for kw in kwargs)
    assert "Positions" not in (tmp_path / "ev" / "summary.md").read_text()


def test_the_abacus_summary_says_which_positions(runs, tmp_path):
    cfg = load_eval_config(overrides=["suites=[algorithmic]", "lengths=[32]", "device=cpu", "progress=false",
                                      "algorithmic.n_examples=2", "algorithmic.shots=[0, 1]"])
    run_eval([str(runs["abacus"])], cfg, tmp_path / "ev", log=lambda *_: None)
    res = json.loads((tmp_path / "ev" / "results.json").read_text())["suites"]["algorithmic"]
    assert res["positions"] == data_ids.TASK_IDS
    assert f"Positions: {data_ids.TASK_IDS}." in (tmp_path / "ev" / "summary.md").read_text()
