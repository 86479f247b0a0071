"""DataConfig: presets, strict keys, and split ranges that must be disjoint."""

import pytest

from posbench.config import CONFIG_DIR, DataConfig, load_config
from posbench.data.corpus_sources import HubFolder, LocalFiles
from posbench.errors import ConfigError


def test_fineweb_preset_equals_the_defaults_and_round_trips():
    cfg = load_config([CONFIG_DIR / "data" / "fineweb_edu.yaml"])
    assert cfg.data == DataConfig()
    assert cfg.data.source.repo == "karpathy/fineweb-edu-100b-shuffle" and cfg.data.tokenizer.vocab_size == 65536
    assert "data:" in cfg.to_yaml() and "shard_{index:05d}.parquet" in cfg.to_yaml()


def test_other_presets_load():
    sample = load_config([CONFIG_DIR / "data" / "fineweb_edu_sample10bt.yaml"]).data
    assert isinstance(sample.source, HubFolder.Config) and sample.source.folder == "sample/10BT"
    local = load_config([CONFIG_DIR / "data" / "local_example.yaml"]).data
    assert isinstance(local.source, LocalFiles.Config) and local.splits.filler.is_empty()


@pytest.mark.parametrize("overrides, message", [
    (["data.splits.filler={start: 1, stop: 3}"], r"data.splits.train \[2, end\) and data.splits.filler "
                                                 r"\[1, 3\) overlap \(shard 2 is in both\)"),
    (["data.splits.val={start: 0, stop: 5}", "data.splits.train={start: 3, stop: 9}"], "overlap"),
    (["data.splits.val={start: 1, stop: 1}"], "data.splits.val is empty"),
    (["data.splits.val={start: 3, stop: 1}"], "need 0 <= start <= stop"),
    (["data.splits.train={start: 2, stop: 2000}"], "goes past the 1823 files"),
    (["data.source.repoo=x/y"], "did you mean `repo`"),
    (["data.source.name=hubb"], "did you mean `hub`"),
    (["data.source={name: local}"], "data.source.paths is empty"),
    (["data.source.pattern=shard.parquet"], "must contain {index}"),
    (["data.tokenizer.name=bytez"], "did you mean `bytes`"),
    (["data.download.workers=0"], "workers > 0"),
    (["data.loader.seeed=1"], "did you mean `seed`"),
])
def test_bad_data_config_fails_with_what_to_change(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


def test_filler_may_be_empty_and_ranges_may_be_reordered():
    cfg = load_config(overrides=["data.splits.train={start: 0, stop: 100}", "data.splits.val={start: 100, stop: 101}",
                                 "data.splits.filler={start: 101, stop: 101}"]).data
    assert [cfg.splits.split_of(i) for i in (0, 99, 100, 101)] == ["train", "train", "val", None]
