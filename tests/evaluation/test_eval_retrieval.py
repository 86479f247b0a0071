"""Passkey and needle grids: prompts fitted to each length, a model that reads the haystack with a
solver written here scores 100%, a learned PE gives n/a beyond its table, corpus filler is used when
the checkpoint's filler shards exist; a short-context model gets an in-distribution cell at its training length
(the short prompt), and every n/a cell says how many tokens its question needs."""

import re

import numpy as np
import pytest

from posbench.data.layout import DataLayout
from posbench.data.manifest import Manifest
from posbench.data.shards import write_shard
from posbench.evaluation.suites.niah import NeedleGrid, NiahConfig
from posbench.evaluation.suites.passkey_eval import PasskeyConfig, PasskeyGrid
from tests.evaluation.helpers import BYTES, ScriptedModel, session_for, small_model, target_for

QUESTIONS = [  # (question that ends the prompt, how to find the answer in the haystack); full and short prompts
    (re.compile(r"The pass key is"), lambda text, q: re.search(r"The pass key is (\d+)\.", text).group(1)),
    (re.compile(r"magic number for (\w+) is"),
     lambda text, q: re.search(rf"magic number for {q.group(1)} is (\d+)\.", text).group(1)),
]
LONG = 512  # a training length whose half holds the full prompts' question and answer (~250 bytes)


def reader(hist):
    """Answers by reading the text: find the question, look the fact up, give its next character."""
    text = bytes(t for t in hist if t < 256).decode()
    for question, solve in QUESTIONS:
        asked = list(question.finditer(text))
        if asked:
            q = asked[-1]
            answer, given = " " + solve(text[:q.start()], q), text[q.end():]
            return ord(answer[len(given)]) if len(given) < len(answer) else None
    return None


@pytest.mark.parametrize("grid,cfg,lengths,too_short", [
    (PasskeyGrid, PasskeyConfig(n_samples=3, depths=[0.0, 0.5, 1.0]), [200, 400, 700], [200]),
    (NeedleGrid, NiahConfig(n_samples=3, depths=[0.0, 0.3, 1.0]), [100, 200, 450], [100]),
])
def test_reader_scores_every_fitting_cell(grid, cfg, lengths, too_short):
    _, run_cfg = small_model("rope", seq_len=LONG)
    ev = grid(cfg, target_for(run_cfg, lengths, seed=1))
    result = ev.run(session_for(ScriptedModel(257, reader)))
    assert result["lengths"] == lengths and ev.work() == len(lengths) * 3 * 3
    for c in result["cells"]:
        if c["length"] in too_short:
            assert c["accuracy"] is None and "cannot hold" in c["na"]
            continue
        assert c["accuracy"] == 1.0 and c["correct"] == 3
        # fitted: never over the length, and not far under it (one filler word is at most ~10 bytes)
        assert c["length"] - 40 <= c["tokens_mean"] <= c["length"]
    assert result["by_length"][str(lengths[-1])] == 1.0
    md = grid.markdown(result)
    assert "| 100.0% |" in md and "n/a" in md and "prompt: full." in md
    assert result["prompt"] == "full" and "What is the" in bytes(ev.fit(0, lengths[-1], 0.5)[0][1:]).decode()


@pytest.mark.parametrize("grid,cfg", [(PasskeyGrid, PasskeyConfig), (NeedleGrid, NiahConfig)])
def test_a_short_context_model_gets_a_cell_at_its_training_length(grid, cfg):
    """nano's 128 tokens (bytes): the full prompts' question and answer alone take more than half of it (the
    passkey's more than all of it), so the grid asks the short prompt at every length and the training length
    is a measured, in-distribution cell; a length too short even for that says how many tokens it needs."""
    _, run_cfg = small_model("rope", seq_len=128)
    ev = grid(cfg(n_samples=2, depths=[0.0, 1.0]), target_for(run_cfg, [32, 64, 128, 256], seed=1))
    result = ev.run(session_for(ScriptedModel(257, reader)))
    assert result["prompt"] == "short" and result["train_len"] == 128
    # the full prompt, without filler, as the grid would have asked it
    full = grid(cfg(), target_for(small_model("rope", seq_len=LONG)[1], [LONG], seed=1)).bare_tokens(0, 0.0)
    assert full > 64 and ev.bare_tokens(0, 0.0) < full
    assert result["prompt_why"] == (f"the full prompt's question and answer take {full} tokens, more than half "
                                    "the training length (128)")
    cells = {(c["length"], c["depth"]): c for c in result["cells"]}
    for depth in (0.0, 1.0):
        assert cells[(128, depth)]["accuracy"] == 1.0 and cells[(128, depth)]["tokens_mean"] <= 128
        assert cells[(256, depth)]["accuracy"] == 1.0
        na = cells[(32, depth)]["na"]
        need = max(ev.bare_tokens(i, depth) for i in range(2))
        assert 32 < need <= 80
        assert na == f"32 tokens cannot hold the short prompt's question and answer (up to {need} tokens with no " \
                     "filler)"
    prompt = bytes(ev.fit(0, 128, 0.5)[0][1:]).decode()
    assert "What is" not in prompt and "There is an important info" not in prompt
    md = grid.markdown(result)
    assert "prompt: short (the full prompt's question and answer take" in md
    assert "Lengths up to 128 tokens (the training length) are in distribution." in md
    assert "- 32: n/a, 32 tokens cannot hold the short prompt's question and answer (up to" in md


def test_a_short_prompt_asked_for_is_kept_and_a_task_default_is_unchanged():
    _, run_cfg = small_model("rope", seq_len=LONG)
    ev = PasskeyGrid(PasskeyConfig(task=PasskeyConfig().task.__class__(prompt="short")), target_for(run_cfg, [200]))
    assert ev.prompt_form == "short" and ev.prompt_why is None


def test_depth_places_the_fact():
    _, run_cfg = small_model("rope", seq_len=LONG)
    ev = PasskeyGrid(PasskeyConfig(), target_for(run_cfg, [600]))
    prompts = {d: ev.fit(0, 600, d) for d in (0.0, 0.5, 1.0)}
    where = {d: bytes(p[0][1:]).find(b"The pass key is") / len(p[0]) for d, p in prompts.items()}
    assert where[0.0] < 0.4 < where[0.5] < 0.7 < where[1.0]
    for prompt, answer, n_new, _ in prompts.values():
        assert len(prompt) + n_new <= 600 and re.fullmatch(r" \d{5}", answer)


def test_learned_pe_beyond_its_table_gives_na_cells():
    model, run_cfg = small_model("learned", seq_len=256)
    result = NeedleGrid(NiahConfig(n_samples=2, depths=[0.0, 1.0]), target_for(run_cfg, [200, 400])).run(
        session_for(model))
    cells = {(c["length"], c["depth"]): c for c in result["cells"]}
    assert all(cells[(200, d)]["accuracy"] in (0.0, 0.5, 1.0) for d in (0.0, 1.0))
    assert all(cells[(400, d)]["accuracy"] is None and "positions" in cells[(400, d)]["na"] for d in (0.0, 1.0))
    assert result["by_length"] == {"200": result["by_length"]["200"], "400": None}


def test_an_absurd_length_for_a_bounded_pe_builds_no_haystack(monkeypatch):
    """10^9 tokens for a 256-position learned PE: n/a at once, no example is built for that length (it
    would allocate the whole prompt before the model refused it), the fitting length is still scored."""
    model, run_cfg = small_model("learned", seq_len=LONG)
    target = target_for(run_cfg, [200, 10**9])
    target.max_positions = model.pe.max_positions
    grid = PasskeyGrid(PasskeyConfig(n_samples=2, depths=[0.5]), target)
    fitted_lengths = []
    fit = grid.fit
    monkeypatch.setattr(grid, "fit", lambda i, L, d: fitted_lengths.append(L) or fit(i, L, d))
    result = grid.run(session_for(model))
    assert set(fitted_lengths) == {200}
    cell = next(c for c in result["cells"] if c["length"] == 10**9)
    assert cell["accuracy"] is None and cell["na"] == f"the PE represents at most {LONG} positions"


def test_corpus_filler_shards_are_used_when_prepared(tmp_path):
    _, run_cfg = small_model("rope", f"data.root={tmp_path}", "data.tokenizer.name=bytes", seq_len=LONG)
    layout = DataLayout.from_config(run_cfg.data)
    layout.tokens_dir.mkdir(parents=True)
    docs = ["Zebras graze near 42 quiet lagoons.", "Violet herons circle the marsh at dawn."] * 30
    tokens = BYTES.encode_documents(docs)
    write_shard(layout.tokens_dir / "filler_00001.bin", tokens, 257, BYTES.fingerprint)
    Manifest(layout.tokens_manifest, "tokens").put("filler_00001.bin", {"split": "filler", "index": 1})
    ev = PasskeyGrid(PasskeyConfig(), target_for(run_cfg, [500]))
    assert ev.filler_name == "corpus"
    prompt = bytes(ev.fit(0, 500, 0.5)[0][1:]).decode()
    assert "herons" in prompt and "42" not in prompt  # words with digits are dropped from the haystack
    assert len(re.findall(r"\d+", prompt)) == 2  # the key, twice in its sentence, and no other number
    assert PasskeyGrid(PasskeyConfig(filler="task"), target_for(run_cfg, [500])).filler_name == "task"


def test_corpus_filler_required_but_missing_fails_at_plan_time(tmp_path):
    from posbench.errors import DataError

    _, run_cfg = small_model("rope", f"data.root={tmp_path}", "data.tokenizer.name=bytes")
    with pytest.raises(DataError, match="filler=corpus"):
        NeedleGrid(NiahConfig(filler="corpus"), target_for(run_cfg, [500]))
    assert np.isnan(NeedleGrid.grid({"lengths": [1], "depths": [0.0], "cells": [
        {"length": 1, "depth": 0.0, "accuracy": None}]})).all()
