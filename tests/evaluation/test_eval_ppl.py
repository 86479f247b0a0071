"""Perplexity: uniform logits give the vocabulary size under both protocols; both protocols match
references written here (per-window model loss; the HF sliding-window loop); learned PE beyond its
table gives n/a rows; data sources and their errors."""

import json
import math

import numpy as np
import pytest
import torch

from posbench.data.layout import DataLayout
from posbench.data.manifest import Manifest
from posbench.data.shards import write_shard
from posbench.errors import DataError
from posbench.evaluation.ppl_data import TextFiles, ValidationShards, WikiText103
from posbench.evaluation.suites.ppl import Perplexity, PplConfig
from tests.evaluation.helpers import BYTES, session_for, small_model, target_for, write_text


def ppl_eval(cfg, path, lengths, **kw):
    return Perplexity(PplConfig(data=TextFiles.Config(paths=[str(path)]), **kw), target_for(cfg, lengths))


def reference_ids(path) -> list[int]:
    """The bytes tokenizer by hand: <|bos|> (256), then the UTF-8 bytes."""
    return [256] + list(path.read_bytes())


def test_uniform_logits_have_perplexity_equal_to_the_vocabulary(tmp_path):
    model, cfg = small_model("rope", vocab=300)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # tied: every logit is exactly 0 -> uniform over 300 ids
    ev = ppl_eval(cfg, write_text(tmp_path / "a.txt"), [16, 64, 100], max_tokens=600, stride=24)
    result = ev.run(session_for(model))
    for row in result["rows"]:
        for protocol in ("nonoverlap", "sliding"):
            assert row[protocol]["ppl"] == pytest.approx(300, rel=1e-5)
            assert row[protocol]["loss"] == pytest.approx(math.log(300), rel=1e-6)
        assert all(v == pytest.approx(math.log(300), rel=1e-6) for v in row["curve"]["loss"])


def test_protocols_match_references_written_here(tmp_path):
    path = write_text(tmp_path / "a.txt")
    model, cfg = small_model("alibi", "model.init_std=0.2", vocab=300)
    L, budget, S = 32, 256, 12
    result = ppl_eval(cfg, path, [L], max_tokens=budget, stride=S, curve_bins=L).run(session_for(model))
    row = result["rows"][0]
    ids = torch.tensor(reference_ids(path))
    with torch.no_grad():
        # non-overlapping: budget // L windows, each the model's own mean cross-entropy
        n = budget // L
        per_window = [model(ids[None, k * L:(k + 1) * L], ids[None, k * L + 1:(k + 1) * L + 1]).loss for k in range(n)]
        assert row["nonoverlap"]["loss"] == pytest.approx(float(torch.stack(per_window).mean()), rel=1e-5)
        assert row["nonoverlap"]["tokens"] == n * L
        # per-position curve (one bin per position): mean over windows of the loss at that position
        logits = torch.cat([model(ids[None, k * L:(k + 1) * L]).logits for k in range(n)])
        targets = torch.stack([ids[k * L + 1:(k + 1) * L + 1] for k in range(n)])
        by_pos = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(0)
        np.testing.assert_allclose(row["curve"]["loss"], by_pos.numpy(), rtol=1e-5)
        # sliding window, the Hugging Face loop over the same span (L + m*S target tokens)
        N = L + ((budget - L) // S) * S
        nll, count, prev_end = 0.0, 0, 0
        for begin in range(0, N, S):
            end = min(begin + L, N)
            trg = end - prev_end
            y = ids[begin + 1:end + 1].clone()
            y[:-trg] = -100
            nll += float(model(ids[None, begin:end], y[None]).loss) * trg
            count, prev_end = count + trg, end
            if end == N:
                break
    assert row["sliding"]["tokens"] == count == N  # every token scored exactly once
    assert row["sliding"]["loss"] == pytest.approx(nll / count, rel=1e-5)
    assert row["sliding"]["stride"] == S


def test_learned_pe_beyond_its_table_gives_na_rows(tmp_path):
    model, cfg = small_model("learned", vocab=300, seq_len=64)
    result = ppl_eval(cfg, write_text(tmp_path / "a.txt"), [32, 64, 128], max_tokens=256).run(session_for(model))
    rows = {r["length"]: r for r in result["rows"]}
    for L in (32, 64):
        assert math.isfinite(rows[L]["nonoverlap"]["ppl"]) and math.isfinite(rows[L]["sliding"]["ppl"])
        assert rows[L]["na"] is None
    assert rows[128]["nonoverlap"] is None and rows[128]["sliding"] is None and rows[128]["curve"] is None
    assert "positions 0..63" in rows[128]["na"]
    assert "n/a" in Perplexity.markdown(result)


def test_validation_shards_of_the_checkpoint_are_the_default(tmp_path):
    _, cfg = small_model("rope", f"data.root={tmp_path}", "data.tokenizer.name=bytes", vocab=300)
    layout = DataLayout.from_config(cfg.data)
    layout.tokens_dir.mkdir(parents=True)
    tokens = np.random.default_rng(0).integers(0, 257, 5000)
    write_shard(layout.tokens_dir / "val_00000.bin", tokens, 257, BYTES.fingerprint)
    Manifest(layout.tokens_manifest, "tokens").put("val_00000.bin", {"split": "val", "index": 0})
    ev = Perplexity(PplConfig(max_tokens=1024), target_for(cfg, [64, 128]))
    assert isinstance(ev.data, ValidationShards)
    assert ev.stream.tolist() == tokens[:1025].tolist()


def test_data_problems_fail_at_plan_time(tmp_path):
    _, cfg = small_model("rope", f"data.root={tmp_path}", "data.tokenizer.name=bytes", vocab=300)
    with pytest.raises(DataError, match="matches no file"):
        ppl_eval(cfg, tmp_path / "missing*.txt", [32])
    small = write_text(tmp_path / "small.txt", n_words=10)
    with pytest.raises(DataError, match="length 512 needs at least 513"):
        ppl_eval(cfg, small, [32, 512])
    with pytest.raises(DataError, match="no validation shards"):
        Perplexity(PplConfig(), target_for(cfg, [32]))


def test_hub_datasets_never_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _, cfg = small_model("rope", vocab=300)
    data = WikiText103.Config(dataset="posbench-tests/no-such-dataset")
    with pytest.raises(DataError, match="never downloads"):
        Perplexity(PplConfig(data=data), target_for(cfg, [32]))
    # a local copy works through the same source (parquet written here)
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = [" = Title = \n", "\n", " some words of a wiki article . \n"] * 40
    pq.write_table(pa.table({"text": lines}), tmp_path / "wiki.parquet")
    ev = Perplexity(PplConfig(data=WikiText103.Config(path=str(tmp_path / "wiki.parquet"))), target_for(cfg, [32]))
    assert ev.stream.tolist()[:65] == [256] + list("".join(lines).encode())[:64]  # rows joined into one text


def test_a_diverged_checkpoint_gives_na_not_nan(tmp_path):
    model, cfg = small_model("rope", vocab=300)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    result = ppl_eval(cfg, write_text(tmp_path / "a.txt"), [32], max_tokens=64).run(session_for(model))
    row = result["rows"][0]
    assert row["nonoverlap"] is None and row["sliding"] is None and "non-finite" in row["na"]
    json.dumps(result, allow_nan=False)  # results.json stays valid JSON
