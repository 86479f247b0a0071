"""Evaluation-data preparation against the loopback hub: WikiText-103, PG-19 and LAMBADA as tiny fixtures,
fetched verified, only the test files, resumed without re-downloading, and read offline by the evaluators."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_helpers import FakeHub

from posbench.cli.data import main
from posbench.config import load_config
from posbench.data.corpus_sources import RAW_MANIFEST
from posbench.data.manifest import Manifest
from posbench.data.tokenizers import ByteTokenizer
from posbench.errors import DataError, DownloadError
from posbench.evaluation.eval_sets import EVAL_SETS, prepare, prepared_files, source
from posbench.evaluation.ppl_data import PG19, WikiText103


def parquet(texts) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": texts}), sink)
    return sink.getvalue().to_pybytes()


WIKI_LINES = [" = Title = \n", "\n", " some words of a wiki article . \n"] * 20
BOOKS = ["It was a dark and stormy night. " * 30, "Call me Ishmael. " * 40]
PASSAGES = ["the river ran under the old bridge near the garden", "she wrote a letter to her brother"]
FILES = {
    "Salesforce/wikitext": {"wikitext-103-raw-v1/test-00000-of-00001.parquet": parquet(WIKI_LINES),
                            "wikitext-103-raw-v1/train-00000-of-00002.parquet": parquet(["not wanted"])},
    "emozilla/pg19": {"data/test-00000-of-00001.parquet": parquet(BOOKS),
                      "data/train-00000-of-00001.parquet": parquet(["not wanted"])},
    "EleutherAI/lambada_openai": {
        "data/lambada_test_en.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in PASSAGES).encode(),
        "data/lambada_test_de.jsonl": b'{"text": "nicht gewollt"}\n'},
}


@pytest.fixture
def hub():
    with FakeHub({}, repo="posbench-tests/unused") as h:
        for repo, files in FILES.items():
            h.add_repo(repo, files)
        yield h


def test_prepare_fetches_only_the_test_files_verified_and_resumes(tmp_path, hub):
    assert main(["download-eval", "--root", str(tmp_path), "--endpoint", hub.url]) == 0
    assert sorted(hub.gets) == ["data/lambada_test_en.jsonl", "data/test-00000-of-00001.parquet",
                                "wikitext-103-raw-v1/test-00000-of-00001.parquet"]
    for name, s in EVAL_SETS.items():
        files = prepared_files(name, tmp_path)
        assert len(files) == 1 and files[0].read_bytes() == FILES[s.repo][files[0].relative_to(
            source(name, tmp_path).raw_dir).as_posix()]
        entry = next(iter(Manifest(source(name, tmp_path).raw_dir / RAW_MANIFEST, "download").files.values()))
        assert entry["sha256"] == FakeHub.sha(files[0].read_bytes())  # verified against the tree listing
    prepare(["lambada"], tmp_path, hub.url, log=lambda *_: None)
    assert len(hub.gets) == 3  # already verified: nothing fetched again


def test_a_corrupt_transfer_is_never_renamed_in(tmp_path, hub):
    hub.faults["data/lambada_test_en.jsonl"] = ["corrupt"]
    with pytest.raises(DownloadError, match="does not match"):
        prepare(["lambada"], tmp_path, hub.url, log=lambda *_: None)
    assert prepared_files("lambada", tmp_path) == [] and not list(tmp_path.rglob("*.jsonl*"))
    prepare(["lambada"], tmp_path, hub.url, log=lambda *_: None)  # a re-run fetches it again
    path = prepared_files("lambada", tmp_path)[0]
    assert path.read_bytes() == FILES["EleutherAI/lambada_openai"]["data/lambada_test_en.jsonl"]
    assert hub.gets.count("data/lambada_test_en.jsonl") == 2


def test_unknown_set_and_missing_files_are_clear_errors(tmp_path, hub, capsys):
    assert main(["download-eval", "lambda", "--root", str(tmp_path), "--endpoint", hub.url]) == 2
    assert "did you mean `lambada`" in capsys.readouterr().err
    hub.repos["EleutherAI/lambada_openai"] = {"data/other.jsonl": b"{}\n"}
    with pytest.raises(DataError, match="no file in EleutherAI/lambada_openai matches"):
        prepare(["lambada"], tmp_path, hub.url, log=lambda *_: None)


def test_perplexity_sources_read_the_prepared_files_offline(tmp_path, hub, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    prepare(["wikitext103", "pg19"], tmp_path / "data", hub.url, log=lambda *_: None)
    run_cfg = load_config(overrides=[f"data.root={tmp_path / 'data'}"])
    tok = ByteTokenizer(ByteTokenizer.Config(), ".").build()
    wiki = WikiText103(WikiText103.Config(), run_cfg, tok)
    assert list(wiki.documents()) == ["".join(WIKI_LINES)]  # rows joined into one text
    assert list(PG19(PG19.Config(), run_cfg, tok).documents()) == BOOKS
