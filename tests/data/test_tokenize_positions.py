"""Position ids in the pretraining shards, end to end: a mix with `addition` tokenized with the bytes tokenizer gives
version 2 train and val shards whose task documents carry the task's own digit places (hand-checked) and whose text
carries 0; `abacus` trains on them and sees those ids; old token-only shards still train; a tokenizer that merges
digits never gets misaligned ids, and a PE that reads ids is refused on such data before any work."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import tiktoken
import torch

from posbench.config import load_config
from posbench.data.info import describe
from posbench.data.layout import DataLayout
from posbench.data.shards import HEADER_BYTES, open_positions, open_shard
from posbench.data.tasks import build_task, get_task_class
from posbench.data.tasks.mix import TaskDocument, build_mixer, mix_tag
from posbench.data.token_positions import document_positions
from posbench.data.tokenize_shards import tokenize
from posbench.data.tokenizers import BOS, Tokenizer
from posbench.errors import ConfigError, DataError
from posbench.pe.abacus import Abacus
from posbench.training.batch_sources import build_stream

ADDITION = "{name: addition, id_range: [1, 3], ood_range: [4, 5]}"
BOS_ID = 256  # the bytes tokenizer's <|bos|>


def jsonl_corpus(folder, n_files=4, docs=30):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_files):
        lines = [json.dumps({"text": f"Doc {i}-{j}: the cat sat on 12 mats, then 345 more."}) for j in range(docs)]
        (folder / f"part_{i}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def overrides(tmp_path, *extra):
    # files 0, 1, 2.. are val, filler, train (the default split ranges)
    return [f"data.root={tmp_path / 'data'}", "data.tokenizer.name=bytes", "data.tokenize.workers=1",
            f"data.source={{name: local, paths: ['{tmp_path / 'corpus'}/*']}}",
            f"data.mix={{tasks: [{ADDITION}], ratio: 0.3}}",
            "model.size=test", "model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64",
            "model.vocab_size=257", "model.seq_len=32", "pe.name=abacus", "pe.max_offset=4",
            f"train.out_dir={tmp_path / 'ck'}", "train.run_name=t", "train.budget_unit=tokens",
            "train.target_budgets=[256]", "train.global_batch_tokens=64", "train.micro_batch=2", "train.device=cpu",
            "train.eval_interval=0", "logging.wandb=disabled", *extra]


def hand_places(text: str) -> list[int]:
    """Independent reference for reverse=all: a digit's place is its index in its run of digits plus one (numbers
    are written least significant digit first); anything else (operator, '=', space) is 0."""
    out, run = [], 0
    for c in text:
        run = run + 1 if c.isdigit() else 0
        out.append(run)
    return out


def test_a_short_example_has_its_places_per_character():
    task = build_task(get_task_class("addition").Config())
    ex = task.render(123, 45)  # 123 + 45 = 168, all reversed
    assert ex.text == "321+54= 861"
    assert task.text_positions(ex).tolist() == [1, 2, 3, 0, 1, 2, 0, 0, 1, 2, 3] == hand_places(ex.text)
    # with index hints a hint letter shares its digit's place: 12 + 3 = 15
    hinted = build_task(get_task_class("addition").Config(index_hints=True))
    ex = hinted.render(12, 3)
    assert ex.text == "a2b1+a3= a5b1"
    assert hinted.text_positions(ex).tolist() == [1, 1, 2, 2, 0, 1, 1, 0, 0, 1, 1, 2, 2]
    # reverse=none defines no ids: the mix then writes none for it
    plain = build_task(get_task_class("addition").Config(reverse="none"))
    assert not plain.defines_positions and plain.text_positions(plain.render(1, 2)) is None


def test_the_shards_carry_the_task_ids_and_abacus_trains_on_them(tmp_path, monkeypatch):
    jsonl_corpus(tmp_path / "corpus")
    cfg = load_config(overrides=overrides(tmp_path)).resolve()
    logs = []
    tokenize(cfg.data, log=logs.append)
    layout = DataLayout.from_config(cfg.data)
    assert layout.positions and layout.tokens_dir.name == f"bytes_{mix_tag(cfg.data.mix)}-pos"
    shards = {p.name: p for p in layout.tokens_dir.glob("*.bin")}
    header, tokens = open_shard(shards["train_00002.bin"])
    pos = open_positions(shards["train_00002.bin"], header)
    assert header.version == 2 and header.positions and len(pos) == len(tokens)
    assert open_shard(shards["val_00000.bin"])[0].positions  # validation reads text as training does
    assert not open_shard(shards["filler_00001.bin"])[0].positions  # filler shards are as before
    # the first task document: its ids are the places a reader assigns by hand, and exactly the task's own ids
    starts = np.append(np.flatnonzero(tokens == BOS_ID), len(tokens))
    docs = [(tokens[a:b], pos[a:b]) for a, b in zip(starts[:-1], starts[1:])]
    task_docs = [(t, p) for t, p in docs if b"+" in bytes(t[1:].tolist()) and b"Doc" not in bytes(t[1:].tolist())]
    corpus_docs = [(t, p) for t, p in docs if b"Doc" in bytes(t[1:].tolist())]
    assert task_docs and corpus_docs
    ids, places = task_docs[0]
    text = bytes(ids[1:].tolist()).decode()
    assert places[0] == 0 and places[1:].tolist() == hand_places(text)
    mixer = build_mixer(cfg.data.mix)
    first = mixer.example_document(0, 2 * (1 << 32))  # file 2's first example
    assert first.text == text and list(first.positions) == places[1:].tolist()
    assert all(not p.any() for _, p in corpus_docs)  # text tokens: 0, "no place"
    assert "2 with position ids (version 2)" in describe(cfg.data) and "carry the per-token ids of addition" in \
        describe(cfg.data)

    source = build_stream(cfg)
    assert "-pos-" in source.fingerprint  # another data identity than the same mix without ids
    rows = source.samples([0, 1, 2, 3])
    assert rows.positions is not None and source.val_samples([0]).positions is not None
    seen = []
    original = Abacus.data_positions
    monkeypatch.setattr(Abacus, "data_positions", lambda self, d, p: seen.append(d.clone()) or original(self, d, p))
    from posbench.training.loop import train

    train(cfg, source)
    assert len(seen) >= 4  # 4 steps of one micro-batch of 2 rows
    assert torch.equal(seen[0], source.samples([0, 1]).positions)
    assert torch.equal(seen[1], source.samples([2, 3]).positions)
    assert any(s.any() for s in seen)  # some batch carried digit places


def test_document_packing_trains_with_the_ids(tmp_path, monkeypatch):
    jsonl_corpus(tmp_path / "corpus")
    cfg = load_config(overrides=overrides(tmp_path, "model.packing.mask=document",
                                          "model.packing.positions=document")).resolve()
    tokenize(cfg.data, log=lambda *_: None)
    source = build_stream(cfg)
    seen = []
    original = Abacus.data_positions
    monkeypatch.setattr(Abacus, "data_positions", lambda self, d, p: seen.append(d.clone()) or original(self, d, p))
    from posbench.training.loop import train

    train(cfg, source)
    assert seen and torch.equal(seen[0], source.samples([0, 1]).positions)


def test_old_token_only_shards_still_train(tmp_path, monkeypatch):
    jsonl_corpus(tmp_path / "corpus")
    cfg = load_config(overrides=overrides(tmp_path, "data.mix.tasks=[{name: reverse}]")).resolve()
    tokenize(cfg.data, log=lambda *_: None)
    layout = DataLayout.from_config(cfg.data)
    assert not layout.positions and not layout.tokens_dir.name.endswith("-pos")
    assert all(open_shard(p)[0].version == 1 for p in layout.tokens_dir.glob("*.bin"))
    seen = []
    monkeypatch.setattr(Abacus, "data_positions", lambda self, d, p: seen.append(d))
    from posbench.training.loop import train

    train(cfg, build_stream(cfg))
    assert not seen  # no ids: abacus uses its own positions


def merging_tokenizer() -> Tokenizer:
    """A byte tokenizer with one merge, "12", as any BPE has for frequent digit pairs."""
    ranks = {bytes([b]): b for b in range(256)} | {b"12": 256}
    return Tokenizer("merge12", tiktoken.Encoding("merge12", pat_str=r"\S+|\s+", mergeable_ranks=ranks,
                                                  special_tokens={BOS: 257}))


def test_a_tokenizer_that_merges_task_symbols_never_gets_ids():
    tok = merging_tokenizer()
    task = build_task(get_task_class("addition").Config())
    ex = task.render(21, 3)  # "12+3= 42": "12" is one token of this tokenizer
    doc = TaskDocument("addition", 0, ex.text, tuple(task.text_positions(ex).tolist()))
    ids = tok.encode_documents([doc.text])
    with pytest.raises(DataError, match="does not give each of its characters one token"):
        document_positions(tok, ids, doc)
    ok = task.render(34, 5)  # "43+5= 93": no merge, aligned
    ok_doc = TaskDocument("addition", 1, ok.text, tuple(task.text_positions(ok).tolist()))
    assert document_positions(tok, tok.encode_documents([ok.text]), ok_doc).tolist() == [0, 1, 2, 0, 1, 0, 0, 1, 2]


def test_a_bpe_mix_with_addition_and_abacus_is_refused_before_any_work(tmp_path, capsys):
    from posbench.cli.data import main

    jsonl_corpus(tmp_path / "corpus")
    cfg = load_config(overrides=overrides(tmp_path, "data.tokenizer.name=bpe", "data.tokenizer.vocab_size=300"))
    with pytest.raises(ConfigError, match="pe.name=abacus reads the per-token position ids") as err:
        build_stream(cfg)
    for needed in ("addition", "bpe", "data.tokenizer.name=bytes", "pe.name=rope"):
        assert needed in str(err.value)
    code = main(["tokenize", *overrides(tmp_path, "data.tokenizer.name=bpe", "data.tokenizer.vocab_size=300")])
    assert code == 2 and "pe.name=abacus reads the per-token position ids" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # nothing trained or written
    from posbench.sweeps.execute import prepare_data

    ok = load_config(overrides=overrides(tmp_path, "pe.name=rope"))  # a bytes run that would tokenize fine
    with pytest.raises(ConfigError, match="pe.name=abacus reads"):
        prepare_data([SimpleNamespace(cfg=ok), SimpleNamespace(cfg=cfg)], log=lambda *_: None)
    assert not (tmp_path / "data").exists()  # every run is checked before the first is tokenized
    # a PE that does not read ids is not refused
    from posbench.training.batch_sources import check_data_positions

    check_data_positions(load_config(overrides=overrides(tmp_path, "data.tokenizer.name=bpe", "pe.name=rope")))


def test_a_bpe_mix_with_addition_writes_text_only_shards_and_says_so(tmp_path):
    jsonl_corpus(tmp_path / "corpus", docs=60)
    cfg = load_config(overrides=overrides(tmp_path, "data.tokenizer.name=bpe", "data.tokenizer.vocab_size=300",
                                          "pe.name=rope")).data
    logs = []
    tokenize(cfg, log=logs.append)
    layout = DataLayout.from_config(cfg)
    assert not layout.positions and not layout.tokens_dir.name.endswith("-pos")
    assert all(not open_shard(p)[0].positions for p in layout.tokens_dir.glob("*.bin"))
    assert any("define per-token position ids" in line and "hold none" in line for line in logs)
    assert "positions   none: addition define ids" in describe(cfg)


def test_verify_checks_the_ids_and_finds_a_tampered_one(tmp_path):
    jsonl_corpus(tmp_path / "corpus")
    cfg = load_config(overrides=overrides(tmp_path)).data
    tokenize(cfg, log=lambda *_: None)
    assert "BAD" not in describe(cfg, verify=True)
    path = DataLayout.from_config(cfg).tokens_dir / "train_00002.bin"
    header, tokens = open_shard(path)
    at = int(np.flatnonzero(open_positions(path, header) == 2)[0])  # a digit's place in a task document
    offset = HEADER_BYTES + header.n_tokens * header.itemsize + 4 * at
    data = bytearray(path.read_bytes())
    data[offset:offset + 4] = np.array([3], dtype="<i4").tobytes()
    path.write_bytes(bytes(data))
    report = describe(cfg, verify=True)
    assert "1 BAD" in report and "position ids of document" in report and "addition" in report


def test_a_size_consistent_header_flip_to_version_1_is_refused_against_the_manifest(tmp_path):
    """The val shard's header rewritten from version 2 (n tokens, then n int32 ids) to version 1 with 3n uint16
    tokens: the same file size, every id below the vocabulary, so the header alone passes; the manifest recorded
    version 2 with n tokens, and the loader refuses the shard naming it (the ids would have been read as tokens)."""
    from posbench.data.loader import build_batch_source
    from posbench.errors import ShardError

    jsonl_corpus(tmp_path / "corpus")
    cfg = load_config(overrides=overrides(tmp_path)).data
    tokenize(cfg, log=lambda *_: None)
    path = DataLayout.from_config(cfg).tokens_dir / "val_00000.bin"
    header, _ = open_shard(path)
    n = header.n_tokens
    raw = bytearray(path.read_bytes())
    h = np.frombuffer(bytes(raw[:HEADER_BYTES]), dtype="<i4").copy()
    h[1], h[3], h[4], h[12] = 1, 3 * n, 0, 0  # version 1, 3n tokens (2 + 4 bytes each -> 3 x 2 bytes), no ids
    raw[:HEADER_BYTES] = h.tobytes()
    path.write_bytes(bytes(raw))
    flipped, tokens = open_shard(path)  # consistent on its own: the header check alone cannot see it
    assert flipped.version == 1 and flipped.n_tokens == 3 * n and int(tokens.max()) < flipped.vocab_size
    with pytest.raises(ShardError) as err:
        build_batch_source(cfg, 32)
    text = str(err.value)
    assert text.startswith(f"{path}: its header says format version 1 with {3 * n:,} tokens")
    assert err.value.exit_code == 2
    assert f"recorded version 2 with {n:,} tokens" in text and "delete the shard and run" in text
