"""The reference framework's task mix (configs/data/mix_reference.yaml): measured task shares through the
real tokenize path, and each reference format checked by an independent reading of its examples."""

import re
from collections import Counter

import pytest
from data_helpers import fake_docs, parquet_bytes

from posbench.config import CONFIG_DIR, load_config
from posbench.data.info import count_mix
from posbench.data.layout import DataLayout
from posbench.data.shards import open_shard
from posbench.data.tasks import build_task, get_task_class
from posbench.data.tasks.mix import CORPUS, build_mixer
from posbench.data.tokenize_shards import tokenize
from posbench.errors import ConfigError

PRESET = CONFIG_DIR / "data" / "mix_reference.yaml"
WEIGHTS = {"simple_copy": .20, "reverse": .25, "sort": .18, "no_carry_add": .17, "passkey": .12, "k_back": .08}


def task(name, **options):
    return build_task(get_task_class(name).Config(**options))


def test_measured_task_shares_are_within_one_percent_of_the_weights(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(4):  # files 0, 1: val and filler; 2, 3: train, 1500 corpus documents each
        (folder / f"part_{i}.parquet").write_bytes(parquet_bytes(fake_docs(1500, 3 + i, words=(3, 12)), 256))
    source = "data.source={name: local, paths: ['" + str(folder) + "/*']}"
    cfg = load_config([PRESET], [f"data.root={tmp_path / 'data'}", "data.tokenizer.name=bytes",
                                 "data.tokenize.workers=1", source,
                                 "data.splits.val={start: 0, stop: 1}", "data.splits.filler={start: 1, stop: 2}",
                                 "data.splits.train={start: 2, stop: null}"]).data
    assert cfg.mix.unit == "documents" and cfg.mix.ratio == 0.1
    tokenize(cfg, log=lambda *_: None)
    layout = DataLayout.from_config(cfg)
    tok, mixer = layout.tokenizer.build(), build_mixer(cfg.mix)
    docs = Counter()
    for path in sorted(layout.tokens_dir.glob("train_*.bin")):
        index = int(path.stem.split("_")[1])
        for kind, c in count_mix(open_shard(path)[1], tok, mixer, index, path).items():
            docs[kind] += c["documents"]
    n_task = sum(n for kind, n in docs.items() if kind != CORPUS)
    assert docs[CORPUS] == 3000
    assert n_task / (n_task + docs[CORPUS]) == pytest.approx(0.1, abs=0.001)  # the 900:100 window
    for name, weight in WEIGHTS.items():
        assert docs[name] / n_task == pytest.approx(weight, abs=0.01), name


def test_no_carry_add_reference_format():
    t = task("no_carry_add", format="reference")
    lengths = Counter()
    for split, (lo, hi) in (("train", (2, 5)), ("ood", (6, 8))):
        for i in range(200):
            ex = t.example(0, i, split)
            m = re.fullmatch(r"add: ([1-9]\d*)\+([1-9]\d*)=", ex.prompt)
            a, b = int(m.group(1)), int(m.group(2))
            assert ex.answer == str(a + b) and ex.text == f"add: {a}+{b}={a + b}"
            for x in (a, b):
                assert lo <= len(str(x)) <= hi
                if split == "train":
                    lengths[len(str(x))] += 1
            # no carry: every column's digits sum to at most 9 (read right to left)
            ra, rb = str(a)[::-1], str(b)[::-1]
            assert all(int(ra[p] if p < len(ra) else 0) + int(rb[p] if p < len(rb) else 0) <= 9
                       for p in range(max(len(ra), len(rb))))
    assert set(lengths) == {2, 3, 4, 5}


def test_sort_over_unique_letters_or_digits():
    t = task("sort", alphabet="letters_or_digits", unique=True)
    kinds = Counter()
    for i in range(300):
        ex = t.example(0, i, "train")
        items = ex.prompt.split(": ", 1)[1].removesuffix(" ->").split()
        assert len(set(items)) == len(items) and ex.answer.split() == sorted(items)
        kind = "digits" if items[0].isdigit() else "letters"
        assert all(x.isdigit() == (kind == "digits") for x in items) and ex.prompt.startswith(f"Sort the {kind}:")
        kinds[kind] += 1
    assert 0.4 < kinds["digits"] / 300 < 0.6
    with pytest.raises(ConfigError, match="unique items need ood_range up to 10"):
        get_task_class("sort").Config(alphabet="letters_or_digits", unique=True, ood_range=(7, 12))


@pytest.mark.parametrize("name", ["simple_copy", "reverse"])
def test_copy_tasks_use_digits_or_letters_half_and_half(name):
    t = task(name, alphabet="letters_or_digits")
    digits = 0
    for i in range(300):
        ex = t.example(0, i, "train")
        items = ex.prompt.split(": ", 1)[1].removesuffix(" ->").split()
        expected = items if name == "simple_copy" else items[::-1]
        assert ex.answer.split() == expected
        digits += items[0].isdigit()
    assert 0.4 < digits / 300 < 0.6


def test_passkey_codes_of_one_to_five_digits():
    t = task("passkey", min_key_digits=1, key_digits=5)
    lengths = Counter()
    for i in range(200):
        ex = t.example(0, i, "train")
        key = ex.answer.strip()
        assert f"The pass key is {key}. Remember it." in ex.prompt and not key.startswith("0")
        lengths[len(key)] += 1
    assert set(lengths) == {1, 2, 3, 4, 5}


def test_new_options_at_their_defaults_keep_existing_fingerprints():
    # values computed before the options existed (commit ff484b6): shard directories made then stay valid
    expected = {"passkey": "05bdf95d99954c51", "no_carry_add": "c4086de91eed4351", "sort": "4a6ebf53979cbce1",
                "simple_copy": "7181b0d202b5e585"}
    assert {name: task(name).fingerprint for name in expected} == expected
    assert task("sort", unique=True).fingerprint != expected["sort"]
