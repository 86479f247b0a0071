"""A run records each token shard's content fingerprint (its size and both ends) in every checkpoint, and a resume
onto a shard with the same name and token count but other bytes is refused naming the shard (the identity's data
fingerprint sees names and counts only). Checkpoints written before the record resume as they did."""

import json

import pytest
from data_helpers import fake_docs, parquet_bytes

from posbench.config import load_config
from posbench.data.layout import DataLayout
from posbench.data.loader import build_batch_source
from posbench.data.shards import CONTENT_SAMPLE_BYTES, HEADER_BYTES, content_fingerprint, write_shard
from posbench.data.tokenize_shards import tokenize
from posbench.errors import ConfigError
from posbench.training.loop import train


def _base(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"part_{i}.parquet").write_bytes(parquet_bytes(fake_docs(60, 7 + i, words=(5, 40))))
    return [f"data.root={tmp_path / 'data'}", "data.tokenizer.name=bytes", "data.tokenize.workers=1",
            f"data.source={{name: local, paths: ['{corpus}/*']}}",
            "data.splits.filler={start: 1, stop: 2}", "data.splits.train={start: 2, stop: null}",
            "model.size=nano", "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=64",
            "model.vocab_size=512", "model.seq_len=32", "train.budget_unit=tokens", "train.target_budgets=[2048]",
            "train.global_batch_tokens=256", "train.micro_batch=8", f"train.out_dir={tmp_path / 'ck'}",
            "train.run_name=run", "train.eval_interval=0", "logging.wandb=disabled", "train.device=cpu"]


def _stopped_run(tmp_path):
    """Shards tokenized here, a run stopped after 2 steps; (base overrides, the train shard, its latest meta.json)."""
    base = _base(tmp_path)
    cfg = load_config(overrides=[*base, "train.max_steps=2"])
    tokenize(cfg.data, log=lambda *_: None)
    train(cfg, build_batch_source(cfg.data, 32))
    (shard,) = DataLayout.from_config(cfg.data).tokens_dir.glob("train_*.bin")
    return base, shard, tmp_path / "ck" / "run" / "latest" / "meta.json"


def _swap_two_tokens(shard):
    """Other bytes, same name, size, header and token count: two token ids exchanged."""
    raw = bytearray(shard.read_bytes())
    a, b = HEADER_BYTES + 2 * 10, HEADER_BYTES + 2 * 11
    assert raw[a:a + 2] != raw[b:b + 2]
    raw[a:a + 2], raw[b:b + 2] = raw[b:b + 2], raw[a:a + 2]
    shard.write_bytes(bytes(raw))


def test_a_shard_with_other_bytes_and_the_same_count_is_refused_on_resume(tmp_path):
    base, shard, meta = _stopped_run(tmp_path)
    recorded = json.loads(meta.read_text())["data_content"]
    assert recorded[shard.name] == content_fingerprint(shard) and any(k.startswith("val_") for k in recorded)
    _swap_two_tokens(shard)
    cfg = load_config(overrides=[*base, "train.resume=auto"])
    with pytest.raises(ConfigError) as err:
        train(cfg, build_batch_source(cfg.data, 32))
    assert str(shard) in str(err.value) and "changed since the checkpoint" in str(err.value)
    assert "restore the shard" in str(err.value) and "start a new run" in str(err.value)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    # the override the identity check honours also lets this one through
    cfg = load_config(overrides=[*base, "train.resume=auto", "train.allow_resume_mismatch=true"])
    assert train(cfg, build_batch_source(cfg.data, 32))["run_dir"].endswith("run")


def test_a_checkpoint_without_the_record_still_resumes(tmp_path):
    base, shard, meta = _stopped_run(tmp_path)
    old = json.loads(meta.read_text())
    del old["data_content"]  # a checkpoint written before content fingerprints existed
    meta.write_text(json.dumps(old))
    cfg = load_config(overrides=[*base, "train.resume=auto"])
    assert train(cfg, build_batch_source(cfg.data, 32))["run_dir"].endswith("run")
    newest = json.loads((tmp_path / "ck" / "run" / "latest" / "meta.json").read_text())
    assert newest["data_content"][shard.name] == content_fingerprint(shard)  # recorded from then on


def test_the_fingerprint_reads_both_ends_only(tmp_path):
    import numpy as np

    n = 3 * CONTENT_SAMPLE_BYTES // 2  # uint16 tokens: 192 KiB of body, more than both samples
    tokens = np.arange(n, dtype=np.int64) % 256
    path = tmp_path / "s.bin"
    write_shard(path, tokens, 256, "00" * 32)
    first = content_fingerprint(path)
    for where, changes in ((HEADER_BYTES + 100, True), (path.stat().st_size - 3, True),
                           (path.stat().st_size // 2, False)):  # the middle is not read: cheap at any size
        raw = bytearray(path.read_bytes())
        raw[where] ^= 1
        (tmp_path / "t.bin").write_bytes(bytes(raw))
        assert (content_fingerprint(tmp_path / "t.bin") != first) == changes, where
