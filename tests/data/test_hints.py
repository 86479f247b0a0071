"""What a missing-data error tells a user to run: for local files `posbench data tokenize` with the very YAML and
data.* overrides the user gave (never `download`, which does nothing for local files); for the hub, download then
tokenize; and a data command given no config says it fell back to the FineWeb-Edu defaults."""

import json

import pytest

from posbench.cli.data import main as data_main
from posbench.cli.train import main_train
from posbench.errors import DataError


@pytest.fixture
def local_corpus(tmp_path, monkeypatch):
    """A run directory holding corpus/a.jsonl, b.jsonl and mydata.yaml (a local source, bytes tokenizer)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "corpus" / f"{name}.jsonl").write_text(
            "".join(json.dumps({"text": f"document {i} of {name}, some words. " * 8}) + "\n" for i in range(20)))
    (tmp_path / "mydata.yaml").write_text(
        "data:\n  source: {name: local, paths: ['corpus/*.jsonl'], tag: mycorpus}\n"
        "  splits: {val: {start: 0, stop: 1}, filler: {start: 1, stop: 2}, train: {start: 2, stop: null}}\n"
        "  tokenizer: {name: bytes}\n")
    return tmp_path


def test_train_on_local_data_without_shards_names_tokenize_with_the_users_yaml(local_corpus, capsys):
    argv = ["mydata.yaml", "--model-size", "nano", "data.root=d", "train.out_dir=ck", "model.d_model=32"]
    assert main_train(argv) == 2
    err = capsys.readouterr().err
    assert "run `posbench data tokenize mydata.yaml data.root=d` (local files: nothing to download)" in err, err
    assert "download" not in err.replace("nothing to download", "")
    # the hint's own command makes the shards the same training command then finds
    assert data_main(["tokenize", "mydata.yaml", "data.root=d"]) == 0
    capsys.readouterr()
    assert main_train([*argv, "train.stream=shards", "train.budget_unit=tokens", "train.target_budgets=[4096]",
                       "train.global_batch_tokens=1024", "train.micro_batch=8", "logging.wandb=disabled"]) == 0


def test_a_data_command_without_a_config_says_it_used_the_defaults(local_corpus, capsys):
    assert data_main(["tokenize"]) == 2
    err = capsys.readouterr().err
    assert "run `posbench data download` first (no data config given, so these are the defaults" in err
    assert "posbench data tokenize configs/data/local_example.yaml" in err


def test_local_split_ranges_with_no_file_say_so_not_download(local_corpus, capsys):
    assert data_main(["tokenize", "mydata.yaml", "data.splits.train.start=5"]) == 2
    err = capsys.readouterr().err
    assert "data.source.paths match 3 files (numbered 0..2" in err and "change data.splits" in err
    assert "download" not in err


def test_hints_outside_a_command_say_what_to_pass():
    from posbench.data.hints import config_args, prepare_hint

    assert prepare_hint(False) == ("run `posbench data tokenize <the YAML files and data.* overrides you train "
                                   "with>` (local files: nothing to download)")
    with config_args(["--data", "fineweb_edu", "data.paths=[a b]"]):
        assert prepare_hint(True) == ("run `posbench data download --data fineweb_edu 'data.paths=[a b]'` then "
                                      "`posbench data tokenize --data fineweb_edu 'data.paths=[a b]'`")
    with pytest.raises(DataError):  # the hint reaches the message the loader raises
        from posbench.data.loader import ShardSet
        ShardSet([], 64)
