"""The carried GPU corpus (data/doc_corpus.py, scripts/make_gpu_corpus.py) on a toy source folder: prose out of
reST, POD, HTML and gzipped files against hand-written expectations, a document split whose pieces are disjoint
and follow the fixed shuffle, byte-identical rebuilds, shards that decode back to the text, a data config that
train.py's loader reads without the jsonl text, and the size and missing-package errors."""

import gzip
import hashlib
import importlib.util
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from posbench.config import load_config
from posbench.data.doc_corpus import Document, config_yaml, data_config, split_documents
from posbench.data.doc_corpus import build as build_corpus
from posbench.data.layout import DataLayout
from posbench.data.loader import build_batch_source, split_shards
from posbench.data.prose import file_prose, html_prose, text_prose
from posbench.data.shards import open_shard
from posbench.errors import DataError

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 512
WORDS = ("the a of and to in is was for on that with as by at from it an be this are which system file value "
         "kernel table query server client function module option default memory page lock thread user "
         "returns changes reads writes calls uses holds keeps sends").split()
PAGE = """<html><head><title>Page title words</title><style>p { color: red }</style></head><body>
<div class="navheader"><a href="prev.html">Previous page link</a> and next chapter link</div>
<h1>The big heading of the page</h1>
<p>First paragraph with <b>bold words</b> and a <a href="#">link text</a>
inside it.</p>
<script>var SCRIPTMARKER = "script words never reach the corpus";</script>
<pre>code_block(x) = y; never_prose()</pre>
<table><tr><td>cell words one</td><td>cell words two here</td></tr></table>
<ul><li>A list item with several words</li><li>x</li></ul>
<p>Entities &amp; quotes &quot;decoded&quot; in this sentence.</p>
</body></html>"""
PAGE_PROSE = ["The big heading of the page", "First paragraph with bold words and a link text inside it.",
              "A list item with several words", 'Entities & quotes "decoded" in this sentence.']
RST = """.. _label:

Section title here
==================

This is :func:`len` and ``x + y`` with a `link <https://x.org>`_ and
a second wrapped line::

    code = block(1)
    more.code()

.. note::

   Indented note with enough plain words.

* first item words here
* second item words here
"""
RST_PROSE = ["Section title here", "This is len and x + y with a link and a second wrapped line:",
             "Indented note with enough plain words.", "* first item words here\n* second item words here"]


def sentences(rng: random.Random, n: int) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + "."
                    for _ in range(n))


def prose_file(rng: random.Random, paragraphs: int) -> str:
    return "\n\n".join(sentences(rng, rng.randint(2, 6)) for _ in range(paragraphs)) + "\n"


def make_source(folder: Path, seed: int = 0) -> Path:
    """~300 KB of generated English-like prose in every supported format, plus text that must not get in."""
    rng = random.Random(seed)
    (folder / "sub").mkdir(parents=True)
    for i in range(6):
        (folder / f"guide_{i}.rst").write_text(RST + prose_file(rng, 60))
        (folder / "sub" / f"notes_{i}.txt").write_text(prose_file(rng, 60))
        (folder / f"ref_{i}.pod").write_text("=head1 NAME\n\n" + prose_file(rng, 40))
    for i in range(3):
        body = "".join(f"<p>{sentences(rng, 4)}</p>\n" for _ in range(60))
        (folder / f"page_{i}.html").write_text(PAGE.replace("</body>", body + "</body>"))
        (folder / "sub" / f"packed_{i}.txt.gz").write_bytes(gzip.compress(prose_file(rng, 60).encode()))
    (folder / "translations").mkdir()
    (folder / "translations" / "it.txt").write_text("TRANSLATIONMARKER " * 10 + "\n")
    (folder / "image.png").write_bytes(b"\x89PNG not text")
    return folder


def toy_build(src: Path, at: Path, log=lambda *a: None, **kw) -> dict:
    """The call a GPU dry run makes: a toy corpus in a temp folder, the tokenizer in this process."""
    return build_corpus([src], at / "out", at / "text", vocab_size=VOCAB, max_mb=1.0, config_path=at / "data.yaml",
                        workers=1, log=log, **kw)


def split_texts(text_dir: Path) -> dict[str, list[str]]:
    parts = sorted(text_dir.glob("part_*.jsonl"))
    read = [[json.loads(line)["text"] for line in p.read_text().splitlines()] for p in parts]
    return {"val": read[0], "filler": read[1], "train": [t for r in read[2:] for t in r]}


def tree_bytes(folder: Path, pattern: str) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob(pattern)) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    at = tmp_path_factory.mktemp("corpus")
    src = make_source(at / "src")
    return src, at, toy_build(src, at)


def test_prose_of_html_rst_pod_and_gz(tmp_path):
    assert html_prose(PAGE) == PAGE_PROSE
    assert text_prose(RST) == RST_PROSE
    pod = "=head1 NAME\n\nC<perl> is a L<language|perlintro> with B<many> words here.\n\n=cut\n"
    assert text_prose(pod) == ["perl is a language with many words here."]
    (tmp_path / "a.rst.gz").write_bytes(gzip.compress(RST.encode()))
    (tmp_path / "b.HTML").write_text(PAGE)
    assert file_prose(tmp_path / "a.rst.gz") == RST_PROSE and file_prose(tmp_path / "b.HTML") == PAGE_PROSE


def test_split_follows_the_fixed_shuffle_and_the_shares():
    docs = [Document("s", f"document number {i} " + "x" * (100 - len(f"document number {i} "))) for i in range(10)]
    order = sorted(docs, key=lambda d: hashlib.sha256(f"7\0{d.text}".encode()).digest())
    # 1,000 bytes: val until 200 bytes are in (2 documents), filler until 300 (1), the rest train
    assert split_documents(docs, 1.0, 0.2, 0.1, seed=7) == {"val": order[:2], "filler": order[2:3], "train": order[3:]}
    # a 500-byte cap keeps the first 5 of the order; each split still gets at least one document
    assert split_documents(docs, 0.0005, 0.01, 0.01, seed=7) == {"val": order[:1], "filler": order[1:2],
                                                                  "train": order[2:5]}


def test_documents_are_split_disjointly_and_cleanly(corpus):
    src, at, summary = corpus
    splits = split_texts(at / "text")
    assert {k: len(v) for k, v in splits.items()} == summary["documents"]
    every = [t for v in splits.values() for t in v]
    assert len(every) == len(set(every))  # no document twice, so none in two splits
    joined = "\n".join(every)
    for marker in ("SCRIPTMARKER", "TRANSLATIONMARKER", "<p>", "</", "never_prose", "Previous page link", "PNG"):
        assert marker not in joined
    assert "First paragraph with bold words and a link text inside it." in joined
    assert "=head1" not in joined and "NAME" not in joined
    assert set(summary["mb_by_source"]) == {"src"} and 0.15 < summary["mb"] < 1.0
    sizes = {k: sum(len(t.encode()) for t in v) for k, v in splits.items()}
    assert 0.02 < sizes["val"] / sum(sizes.values()) < 0.08 and 0.02 < sizes["filler"] / sum(sizes.values()) < 0.08


def test_shards_decode_back_to_the_documents(corpus):
    _, at, summary = corpus
    cfg = data_config((at / "data.yaml").read_text())
    layout = DataLayout.from_config(cfg)
    tok = layout.tokenizer.build()
    assert tok.vocab_size == VOCAB and Path(summary["tokenizer"]) == layout.tokenizer.folder
    for split in ("val", "filler"):  # pure corpus text: <|bos|> doc <|bos|> doc ...
        (path,) = split_shards(layout, cfg.splits, split)
        _, tokens = open_shard(path, tok.fingerprint)
        tokens = np.asarray(tokens)
        docs = np.split(tokens, np.flatnonzero(tokens == tok.bos_id))[1:]
        assert [tok.decode(d[1:]) for d in docs] == split_texts(at / "text")[split]
        assert len(tokens) == summary["tokens"][split]


def test_rebuild_is_byte_identical_and_skips_done_work(corpus, tmp_path):
    src, at, _ = corpus
    before = {p: p.stat().st_mtime_ns for p in (at / "out").rglob("*.bin")}
    logged = []
    toy_build(src, at, log=logged.append)
    assert any("0 files (3 already done)" in str(m) for m in logged) and not any("training" in str(m) for m in logged)
    assert {p: p.stat().st_mtime_ns for p in (at / "out").rglob("*.bin")} == before
    toy_build(src, tmp_path)  # elsewhere, from scratch
    for pattern in ("*.bin", "tokenizer.*", "*.jsonl"):
        first = tree_bytes(at, pattern)
        assert first and first == tree_bytes(tmp_path, pattern)


def test_changed_text_retrains_the_tokenizer(tmp_path):
    src = make_source(tmp_path / "src", seed=1)
    first = toy_build(src, tmp_path)
    rank_file = tree_bytes(tmp_path / "out", "tokenizer.*")
    (src / "more.txt").write_text(prose_file(random.Random(2), 80))
    second = toy_build(src, tmp_path)
    assert second["mb"] > first["mb"] and tree_bytes(tmp_path / "out", "tokenizer.*") != rank_file
    shards = sorted(p.name for p in (tmp_path / "out" / "tokens").rglob("*.bin"))
    assert shards == ["filler_00001.bin", "train_00002.bin", "val_00000.bin"]  # the old ones went with their BPE


def test_train_config_reads_the_shards_without_the_text(corpus, tmp_path):
    _, at, _ = corpus
    shutil.move(at / "text", tmp_path / "text")  # the GPU machine gets the data root alone
    try:
        cfg = load_config([at / "data.yaml"], model_size="nano")
        assert cfg.model.vocab_size == VOCAB == cfg.data.tokenizer.vocab_size
        source = build_batch_source(cfg.data, cfg.model.seq_len)
        assert source.train.vocab_size == VOCAB and source.n_val() >= 1 and source.train.n_windows > 10
    finally:
        shutil.move(tmp_path / "text", at / "text")


def test_committed_config_is_the_default_build():
    committed = (ROOT / "configs" / "data" / "gpu_corpus.yaml").read_text()
    assert committed == config_yaml("data/gpu_corpus", "data/gpu_corpus_text", 65536)
    cfg = load_config([ROOT / "configs" / "data" / "gpu_corpus.yaml"], model_size="tiny")
    assert (cfg.data.root, cfg.data.tokenizer.name, cfg.data.tokenizer.vocab_size, cfg.model.vocab_size) == \
        ("data/gpu_corpus", "bpe", 65536, 65536)


def test_folder_over_the_cap_names_the_flag(corpus, tmp_path):
    src, _, _ = corpus
    with pytest.raises(DataError, match=r"over the 0.01 MiB limit: lower --max-mb"):
        toy_build(src, tmp_path, max_mib=0.01)


def test_missing_packages_exit_2_with_the_apt_command(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("make_gpu_corpus", ROOT / "scripts" / "make_gpu_corpus.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (tmp_path / "empty").mkdir()
    argv = ["--source", str(tmp_path / "empty"), "--source", str(tmp_path / "absent"), "--out", str(tmp_path / "o"),
            "--text-out", str(tmp_path / "t"), "--config", str(tmp_path / "c.yaml")]
    assert script.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no documentation text") and "apt-get install -y python3.11-doc linux-doc" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "c.yaml").exists()
