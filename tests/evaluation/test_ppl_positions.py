"""Evaluation reads text the way a data-position PE trained on it: an abacus checkpoint trained on shards whose
`addition` documents carry digit places (and text TEXT_ID) is scored on its validation shards with their ids,
windowed exactly as the tokens under both protocols and at a length beyond its default positions (coupled reads
them too); text without ids gets TEXT_ID for every token (perplexity on a file, LAMBADA, retrieval prompts); a
rope checkpoint on the same shards is scored with its own positions, exactly as before. References: the val
shards' ids read here with `open_positions` and windowed by hand, and losses computed here with the model's
forward."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from posbench.config import load_config
from posbench.data.layout import DataLayout
from posbench.data.loader import split_shards
from posbench.data.shards import HEADER_BYTES, open_positions, open_shard
from posbench.data.tokenize_shards import tokenize
from posbench.evaluation import data_ids
from posbench.evaluation.eval_config import load_eval_config
from posbench.evaluation.eval_runner import run_eval
from posbench.evaluation.generate import greedy_generate
from posbench.evaluation.loading import load_model
from posbench.evaluation.ppl_data import TextFiles
from posbench.evaluation.suites.lambada import Lambada, LambadaConfig
from posbench.evaluation.suites.passkey_eval import PasskeyConfig, PasskeyGrid
from posbench.evaluation.suites.ppl import Perplexity, PplConfig
from posbench.model.transformer import Transformer
from posbench.pe.abacus import Abacus
from posbench.pe.coupled import CoupledPositions
from posbench.training.batch_sources import build_stream
from posbench.training.loop import train
from tests.data.test_tokenize_positions import jsonl_corpus, overrides
from tests.evaluation.helpers import BYTES, session_for, target_for, write_text
from tests.evaluation.test_eval_lambada import passages

LENGTHS = [16, 40]  # 40 is past abacus's default positions (model.seq_len = 32): only the ids reach it
MAX_TOKENS = 160


def pattern(n: int) -> np.ndarray:
    """Digit places 0..9 in no window-periodic order, within abacus's table (model.seq_len + max_offset - 1)."""
    return (np.arange(n) * 7 + np.arange(n) // 13) % 10


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ppl_positions")
    jsonl_corpus(tmp / "corpus", docs=60)
    out = {}
    for pe, pe_args in (("abacus", ["pe.name=abacus", "pe.max_offset=4"]), ("coupled", ["pe.name=coupled"]),
                        ("rope", ["pe.name=rope"])):
        args = [o for o in overrides(tmp, f"train.run_name={pe}") if not o.startswith("pe.")] + pe_args
        cfg = load_config(overrides=args).resolve()
        if pe == "abacus":
            tokenize(cfg.data, log=lambda *_: None)
        out[pe] = Path(train(cfg, build_stream(cfg))["run_dir"])
    out["cfg"] = cfg
    # the mix puts task documents in the train shards only, so the val shards' ids are all TEXT_ID; a pattern of
    # places written over them here makes any misalignment of ids and tokens (a window off by one) visible
    for path in split_shards(DataLayout.from_config(cfg.data), cfg.data.splits, "val"):
        header, _ = open_shard(path)
        assert not np.asarray(open_positions(path, header)).any()
        offset = HEADER_BYTES + header.n_tokens * header.itemsize
        data = bytearray(path.read_bytes())
        data[offset:] = pattern(header.n_tokens).astype("<i4").tobytes()
        path.write_bytes(bytes(data))
    return out


def val_ids(cfg) -> np.ndarray:
    """The val shards' ids in stream order, read here straight from the files."""
    paths = split_shards(DataLayout.from_config(cfg.data), cfg.data.splits, "val")
    return np.concatenate([np.asarray(open_positions(p, open_shard(p)[0])) for p in paths]).astype(np.int64)


def expected_windows(ids: np.ndarray, n_stream: int) -> list[np.ndarray]:
    """The inputs' ids of every window the suite scores, in its order: per length, non-overlapping windows at k*L,
    then sliding windows at k*(L/2) (ppl.py's module doc), each of L inputs."""
    out = []
    for L in LENGTHS:
        n = max(1, min(MAX_TOKENS // L, (n_stream - 1) // L))
        out += [ids[k * L:k * L + L] for k in range(n)]
        S = L // 2
        m = max(0, min((MAX_TOKENS - L) // S, (n_stream - 1 - L) // S))
        out += [ids[k * S:k * S + L] for k in range(m + 1)]
    return out


def eval_ppl(run_dir: Path, out: Path, *extra) -> dict:
    cfg = load_eval_config(overrides=["suites=[ppl]", f"lengths={LENGTHS}", "device=cpu", "progress=false",
                                      f"ppl.max_tokens={MAX_TOKENS}", *extra])
    run_eval([str(run_dir)], cfg, out, log=lambda *_: None)
    return json.loads((out / "results.json").read_text())


def hand_loss(model, stream: np.ndarray, L: int, n: int, ids: np.ndarray | None) -> float:
    """Mean cross-entropy over n non-overlapping windows of L tokens, by the model's forward."""
    win = torch.from_numpy(np.stack([stream[k * L:k * L + L + 1] for k in range(n)]))
    kw = {} if ids is None else {"data_pos_BT": torch.from_numpy(np.stack([ids[k * L:k * L + L] for k in range(n)]))}
    with torch.no_grad():
        logits = model(win[:, :-1], **kw).logits
    return float(F.cross_entropy(logits.flatten(0, 1).double(), win[:, 1:].flatten()))


def spy_ids(cls, monkeypatch) -> list:
    """The data ids each call of `cls.data_positions` receives, in order (the call itself runs as before)."""
    seen = []
    original = cls.data_positions
    monkeypatch.setattr(cls, "data_positions", lambda self, d, p: seen.append(d.cpu().clone()) or original(self, d, p))
    return seen


def test_abacus_ppl_reads_the_val_shards_ids_windowed_as_the_tokens(runs, tmp_path, monkeypatch):
    cfg = runs["cfg"]
    assert data_ids.trained_with_ids(load_model(runs["abacus"]).cfg)
    seen = spy_ids(Abacus, monkeypatch)
    res = eval_ppl(runs["abacus"], tmp_path / "ev")
    ppl = res["suites"]["ppl"]
    assert ppl["positions"] == data_ids.SHARD_IDS
    assert "Positions: the validation shards' per-token position ids" in (tmp_path / "ev" / "summary.md").read_text()

    ids = val_ids(cfg)
    want = expected_windows(ids, ppl["stream_tokens"])
    got = [row for batch in seen for row in batch.long().numpy()]
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert np.array_equal(ids, pattern(len(ids))) and all(w.any() for w in want)

    # the scored loss is the loss with the ids passed, and differs from the model's default positions
    loaded = load_model(runs["abacus"])
    stream = np.concatenate([np.asarray(open_shard(p)[1]) for p in split_shards(
        DataLayout.from_config(cfg.data), cfg.data.splits, "val")]).astype(np.int64)
    row16 = next(r for r in ppl["rows"] if r["length"] == 16)
    n = row16["nonoverlap"]["windows"]
    with_ids = hand_loss(loaded.model, stream, 16, n, ids)
    default = hand_loss(loaded.model, stream, 16, n, None)
    assert row16["nonoverlap"]["loss"] == pytest.approx(with_ids, rel=1e-5)
    assert abs(with_ids - default) > 1e-3
    # past the default positions' table the ids still score (default positions would be n/a here)
    row40 = next(r for r in ppl["rows"] if r["length"] == 40)
    assert row40["na"] is None and row40["nonoverlap"]["loss"] == pytest.approx(
        hand_loss(loaded.model, stream, 40, row40["nonoverlap"]["windows"], ids), rel=1e-5)


def test_coupled_ppl_reads_the_val_shards_ids_too(runs, monkeypatch):
    loaded = load_model(runs["coupled"])
    evaluator = Perplexity(PplConfig(max_tokens=64, protocols=["nonoverlap"]), target_for(loaded.cfg, [16]))
    seen = spy_ids(CoupledPositions, monkeypatch)
    res = evaluator.run(session_for(loaded.model))
    assert res["positions"] == data_ids.SHARD_IDS
    ids = val_ids(runs["cfg"])
    assert [r.long().tolist() for b in seen for r in b] == [ids[k * 16:k * 16 + 16].tolist() for k in range(4)]


def test_text_without_ids_gets_the_text_id_for_every_token(runs, tmp_path, monkeypatch):
    loaded = load_model(runs["abacus"])
    text = write_text(tmp_path / "t.txt", n_words=200)
    evaluator = Perplexity(PplConfig(data=TextFiles.Config(paths=[str(text)]), max_tokens=64),
                           target_for(loaded.cfg, [16]))
    seen = spy_ids(Abacus, monkeypatch)
    res = evaluator.run(session_for(loaded.model))
    assert res["positions"] == data_ids.TEXT_IDS and "Positions: TEXT_ID (0)" in Perplexity.markdown(res)
    assert seen and all(s.shape[1] == 16 and not s.any() for s in seen)
    stream = evaluator.stream
    n = res["rows"][0]["nonoverlap"]["windows"]
    assert res["rows"][0]["nonoverlap"]["loss"] == pytest.approx(
        hand_loss(loaded.model, stream, 16, n, np.zeros_like(stream)), rel=1e-5)

    # greedy decoding of a text prompt (passkey / niah / RULER prompts): TEXT_ID for the prompt and every new token
    seen.clear()
    prompt = [int(t) for t in BYTES.encode_documents(["The grass is green. The pass key is 12345. Remember"])]
    greedy_generate(loaded.model, [prompt], [5], "cpu", text_ids=True)
    assert [tuple(s.shape) for s in seen] == [(1, len(prompt))] + [(1, 1)] * 4 and not any(s.any() for s in seen)


def test_retrieval_prompts_are_read_as_text_past_the_default_positions(runs, monkeypatch):
    loaded = load_model(runs["abacus"])
    limit = loaded.model.pe.max_positions  # 32: its default positions (token indices) end here
    target = replace(target_for(loaded.cfg, [256]), max_positions=limit)
    grid = PasskeyGrid(PasskeyConfig(depths=[0.5], n_samples=2, filler="task"), target)
    seen = spy_ids(Abacus, monkeypatch)
    res = grid.run(session_for(loaded.model))
    assert res["positions"] == data_ids.TEXT_IDS
    (cell,) = res["cells"]
    assert cell["na"] is None and cell["tokens_mean"] > limit  # scored, not n/a at the default positions' limit
    assert seen and seen[0].shape[1] > limit and not any(s.any() for s in seen)


def test_lambada_passages_are_read_as_text(runs, tmp_path, monkeypatch):
    loaded = load_model(runs["abacus"])
    passages(tmp_path / "lambada.jsonl", n=4)
    ev = Lambada(LambadaConfig(path=str(tmp_path / "lambada.jsonl")), target_for(loaded.cfg, [32]))
    seen = spy_ids(Abacus, monkeypatch)
    assert ev.run(session_for(loaded.model))["positions"] == data_ids.TEXT_IDS
    assert seen and not any(s.any() for s in seen)


def test_rope_ppl_is_computed_with_its_own_positions_as_before(runs, tmp_path, monkeypatch):
    loaded = load_model(runs["rope"])
    assert not data_ids.trained_with_ids(loaded.cfg)
    kwargs = []
    original = Transformer.hidden
    monkeypatch.setattr(Transformer, "hidden",
                        lambda self, x, *a, **kw: kwargs.append(kw) or original(self, x, *a, **kw))
    res = eval_ppl(runs["rope"], tmp_path / "ev")
    ppl = res["suites"]["ppl"]
    assert ppl["positions"] == data_ids.OWN and "Positions" not in (tmp_path / "ev" / "summary.md").read_text()
    assert kwargs and all("data_pos_BT" not in kw for kw in kwargs)  # called exactly as before the ids existed
    monkeypatch.setattr(Transformer, "hidden", original)
    stream = np.concatenate([np.asarray(open_shard(p)[1]) for p in split_shards(
        DataLayout.from_config(runs["cfg"].data), runs["cfg"].data.splits, "val")]).astype(np.int64)
    for row in ppl["rows"]:
        assert row["nonoverlap"]["loss"] == pytest.approx(
            hand_loss(loaded.model, stream, row["length"], row["nonoverlap"]["windows"], None), rel=1e-5)
