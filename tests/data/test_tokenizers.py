"""Tokenizers: byte-level, named tiktoken encodings (+ <|bos|>), and a trained BPE saved without pickle."""

import base64

import pytest
import tiktoken
from data_helpers import fake_docs

from posbench.config_loader import from_dict
from posbench.data import rankfile
from posbench.data.bpe_train import train_bpe
from posbench.data.tokenizers import BOS, TokenizerConfig, TrainedBPE, build_tokenizer
from posbench.errors import ConfigError, DataError

# Pinned: a change here means every existing shard's fingerprint changes (and they get redone).
BYTES_FINGERPRINT = "c1752cbfb8740a6856ef1753877a3a5fae39def1b83a0f5a46761ae5fced5661"


def cfg(**kw):
    return from_dict(TokenizerConfig, kw, "data.tokenizer")


def test_bytes_tokenizer_is_utf8_bytes_plus_bos(tmp_path):
    tok = build_tokenizer(cfg(name="bytes"), tmp_path)
    assert (tok.vocab_size, tok.bos_id, tok.fingerprint) == (257, 256, BYTES_FINGERPRINT)
    assert tok.encode("hé<|bos|>") == list("hé<|bos|>".encode())  # the literal text is not the special token
    docs = tok.encode_documents(["ab", "", "✓"])
    assert docs.tolist() == [256, 97, 98, 256, 256, 0xE2, 0x9C, 0x93]
    assert tok.encode_documents(["\ud800x"]).tolist() == [256, *"\ufffdx".encode()]  # lone surrogate
    assert not list(tmp_path.iterdir())  # needs no file


def train_small(folder, docs, vocab=400):
    c = cfg(name="bpe", vocab_size=vocab, path=str(folder))
    train_bpe(c, docs, folder, trained_on="test corpus", log=lambda *_: None)
    return c


def test_bpe_round_trips_and_reloads_identically(tmp_path):
    folder = tmp_path / "bpe"
    c = train_small(folder, fake_docs(200, 0))
    tok = build_tokenizer(c, tmp_path / "unused")
    assert (tok.vocab_size, tok.bos_id) == (400, 399)
    held_out = fake_docs(5, 99) + ["emoji 🦙🦙 tabs\t\tand <|bos|> literal", "  leading spaces\n\n\r\n"]
    for text in held_out:
        ids = tok.encode(text)
        assert max(ids) < 399 and tok.decode(ids) == text
    assert len(tok.encode(held_out[0])) < len(held_out[0].encode()) / 2  # it learned real merges
    # the rank file is plain text: decode it independently of our loader
    lines = (folder / "tokenizer.tiktoken").read_text().splitlines()
    ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in lines)}
    assert ranks == tok.encoding._mergeable_ranks and len(ranks) == 399
    again = build_tokenizer(c, tmp_path / "unused")
    assert again.fingerprint == tok.fingerprint
    assert [again.encode(t) for t in held_out] == [tok.encode(t) for t in held_out]
    side = rankfile.load(folder)[0]
    assert side["special_tokens"] == {BOS: 399} and side["fingerprint"] == tok.fingerprint


def test_retrained_bpe_in_the_same_folder_is_not_served_stale(tmp_path):
    # tiktoken's own loader caches local files by path; ours must read the new contents
    folder = tmp_path / "bpe"
    c = train_small(folder, fake_docs(100, 0))
    first = build_tokenizer(c, folder)
    train_small(folder, ["zzzz qqqq " * 50 + str(i) for i in range(100)] + fake_docs(20, 3))
    second = build_tokenizer(c, folder)
    assert first.fingerprint != second.fingerprint
    assert len(second.encode("zzzz qqqq")) < len(first.encode("zzzz qqqq"))


def test_damaged_tokenizer_files_are_rejected(tmp_path):
    folder = tmp_path / "bpe"
    c = train_small(folder, fake_docs(100, 0))
    ranks_path = folder / "tokenizer.tiktoken"
    lines = ranks_path.read_text().splitlines()
    ranks_path.write_text("\n".join(lines[:300] + ["not-base64!! 300"] + lines[301:]) + "\n")
    with pytest.raises(DataError, match=r"tokenizer.tiktoken:301: bad rank line"):
        build_tokenizer(c, folder)
    a, b = lines[300].split()[0], lines[301].split()[0]  # swap two merges: valid file, other tokenizer
    ranks_path.write_text("\n".join(lines[:300] + [f"{b} 300", f"{a} 301"] + lines[302:]) + "\n")
    with pytest.raises(DataError, match="does not match its sidecar"):
        build_tokenizer(c, folder)
    with pytest.raises(DataError, match="no trained tokenizer"):
        build_tokenizer(cfg(name="bpe", vocab_size=400), tmp_path / "empty")


def test_bpe_needs_enough_text_for_its_vocab(tmp_path):
    with pytest.raises(DataError, match="only supports"):
        train_small(tmp_path / "bpe", ["tiny corpus"], vocab=5000)
    assert not (tmp_path / "bpe" / "tokenizer.json").exists()


def test_bpe_config_is_checked():
    with pytest.raises(ConfigError, match="needs >= 257"):
        cfg(name="bpe", vocab_size=100)
    with pytest.raises(ConfigError, match="does not compile"):
        cfg(name="bpe", pattern="(unclosed")
    with pytest.raises(ConfigError, match="did you mean `gpt2`"):
        cfg(name="gpt3")
    assert TrainedBPE.Config(vocab_size=70000).tag() == "bpe70000"


def test_named_encoding_gets_bos_after_its_last_id(tmp_path, monkeypatch):
    fake = tiktoken.Encoding("fake", pat_str=r"\S+|\s+", mergeable_ranks={bytes([b]): b for b in range(256)},
                             special_tokens={"<|endoftext|>": 256})
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: fake)
    tok = build_tokenizer(cfg(name="gpt2"), tmp_path)
    assert (tok.bos_id, tok.vocab_size) == (257, 258)
    assert tok.encode_documents(["a<|endoftext|>"]).tolist()[:3] == [257, 97, 60]  # specials stay text

    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(DataError, match="TIKTOKEN_CACHE_DIR"):
        build_tokenizer(cfg(name="cl100k_base"), tmp_path)
