"""The task mix in the data stage: measured shares, fingerprints, disjointness from evaluation, bad input.

Corpora are tiny parquet files made here; shards are written by the real tokenize path (bytes tokenizer).
"""

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
from data_helpers import data_config, fake_docs, parquet_bytes

from posbench.data.info import count_mix, describe
from posbench.data.layout import DataLayout
from posbench.data.loader import build_batch_source
from posbench.data.shards import open_shard
from posbench.data.tasks import build_task
from posbench.data.tasks.mix import CORPUS, EXAMPLES_PER_FILE, build_mixer
from posbench.data.tokenize_shards import tokenize
from posbench.errors import ConfigError

MIX = "data.mix={tasks: [{name: k_back}, {name: reverse}, {name: sort}, {name: simple_copy}], ratio: 0.1}"


def corpus(folder, n_files=4, docs_per_file=150):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_files):
        (folder / f"part_{i}.parquet").write_bytes(parquet_bytes(fake_docs(docs_per_file, 7 + i, words=(5, 40))))
    return folder


def config(tmp_path, *extra, root="data"):
    # files 0 and 1 are val and filler, 2.. train (the local preset's layout)
    return data_config(tmp_path / root, "data.source={name: local, paths: ['" + str(tmp_path / "corpus") + "/*']}",
                       "data.splits.filler={start: 1, stop: 2}", "data.splits.train={start: 2, stop: null}",
                       *extra, num_shards=None)


def train_shards(cfg):
    layout = DataLayout.from_config(cfg)
    manifest = json.loads((layout.tokens_dir / "manifest.json").read_text())["files"]
    return layout, {name: e for name, e in sorted(manifest.items()) if e["split"] == "train"}


def documents(ids, bos):
    starts = np.flatnonzero(ids == bos)
    return [ids[a + 1:b] for a, b in zip(starts, np.append(starts[1:], len(ids)))]


@pytest.mark.parametrize("unit", ["tokens", "documents"])
def test_measured_share_matches_the_ratio_and_val_and_filler_stay_pure(tmp_path, unit):
    corpus(tmp_path / "corpus")
    cfg = config(tmp_path, MIX, f"data.mix.unit={unit}")
    tokenize(cfg, log=lambda *_: None)
    layout, shards = train_shards(cfg)
    assert layout.tokens_dir.name.startswith("bytes_mix-")
    tok = layout.tokenizer.build()
    mixer = build_mixer(cfg.mix)
    task = {"documents": 0, "tokens": 0}
    total = {"documents": 0, "tokens": 0}
    for name, entry in shards.items():
        header, ids = open_shard(layout.tokens_dir / name)
        recount = count_mix(ids, tok, mixer, entry["index"], name)
        assert recount == entry["mix"]  # what the manifest says is what the shard holds
        assert recount[CORPUS]["documents"] == 150  # every corpus document, none dropped
        total["documents"] += header.n_docs
        total["tokens"] += header.n_tokens
        for key in task:
            task[key] += sum(c[key] for k, c in recount.items() if k != CORPUS)
        # the task documents go to the tasks in turn
        assert {k for k in recount if k != CORPUS} == {"k_back", "reverse", "sort", "simple_copy"}
    share = task[unit] / total[unit]
    assert share == pytest.approx(0.1, abs=0.01)
    other = "documents" if unit == "tokens" else "tokens"
    assert abs(task[other] / total[other] - 0.1) > 0.02  # the two units really differ on this corpus
    for split, n_docs in (("val_00000.bin", 150), ("filler_00001.bin", 150)):
        assert open_shard(layout.tokens_dir / split)[0].n_docs == n_docs  # pure corpus text
    report = describe(cfg, verify=True)
    assert "recounted from the shards (--verify)" in report and "BAD" not in report
    line = next(x for x in report.splitlines() if x.strip().startswith("tasks (all)"))
    column = 3 if unit == "documents" else 5
    assert line.split()[column] == f"{share:.2%}"  # the measured share, as info prints it


def test_verify_finds_a_tampered_task_document(tmp_path):
    corpus(tmp_path / "corpus", n_files=3)
    cfg = config(tmp_path, MIX)
    tokenize(cfg, log=lambda *_: None)
    layout, shards = train_shards(cfg)
    name = next(iter(shards))
    path = layout.tokens_dir / name
    header, ids = open_shard(path)
    # flip one byte inside the first task document (a letter for another letter keeps the length)
    tok = layout.tokenizer.build()
    docs = documents_with_bos(np.asarray(ids), tok.bos_id)
    replay = build_mixer(cfg.mix).replay(docs, lambda text: tok.encode_documents([text]),
                                         shards[name]["index"] * EXAMPLES_PER_FILE)
    j = next(i for i, (kind, ok) in enumerate(replay) if kind != CORPUS)
    offset = sum(len(d) for d in docs[:j]) + len(docs[j]) - 1  # its last byte
    data = bytearray(path.read_bytes())
    at = 1024 + offset * np.dtype(header.dtype).itemsize  # 256 x int32 header
    data[at] = ord("z") if data[at] != ord("z") else ord("y")
    path.write_bytes(bytes(data))
    assert "BAD" in describe(cfg, verify=True)
    # the command says so in its exit code too, after the report (exit 2: bad input data)
    from posbench.cli.data import cmd_info
    from posbench.errors import DataError

    with pytest.raises(DataError, match="found bad shards"):
        cmd_info(cfg, verify=True)
    cmd_info(cfg, verify=False)  # without --verify nothing is read: no verdict, no error


def documents_with_bos(ids, bos):
    starts = np.flatnonzero(ids == bos)
    return [ids[a:b] for a, b in zip(starts, np.append(starts[1:], len(ids)))]


def test_task_documents_are_the_examples_eval_asks_in_the_same_format(tmp_path):
    corpus(tmp_path / "corpus", n_files=3)
    cfg = config(tmp_path, MIX)
    tokenize(cfg, log=lambda *_: None)
    layout, shards = train_shards(cfg)
    tok = layout.tokenizer.build()
    name, entry = next(iter(shards.items()))
    ids = np.asarray(open_shard(layout.tokens_dir / name)[1])
    docs = documents(ids, tok.bos_id)
    # which documents are task documents follows from the rule over the documents as written (BOS included)
    kinds = [k for k, _ in build_mixer(cfg.mix).replay(documents_with_bos(ids, tok.bos_id), lambda t: np.zeros(0))]
    j = kinds.index("k_back")  # the first task document goes to the first task
    first = build_mixer(cfg.mix).task_document(0, entry["index"] * EXAMPLES_PER_FILE)
    ex = build_task(cfg.mix.tasks[0]).example(cfg.mix.seed, first.example_index, "train")
    # eval.py asks <|bos|> + encode(prompt) and expects the answer: the document is exactly that, answered
    assert tok.decode(docs[j].tolist()) == ex.prompt + ex.answer
    assert list(docs[j][: len(tok.encode(ex.prompt))]) == tok.encode(ex.prompt)


def test_no_evaluation_example_occurs_in_the_training_shards(tmp_path):
    corpus(tmp_path / "corpus", n_files=6, docs_per_file=300)
    cfg = config(tmp_path, MIX)
    tokenize(cfg, log=lambda *_: None)
    layout, shards = train_shards(cfg)
    tok = layout.tokenizer.build()
    seen = set()
    for name in shards:
        for doc in documents(open_shard(layout.tokens_dir / name)[1], tok.bos_id):
            seen.add(hashlib.sha256(np.asarray(doc, dtype=np.int64).tobytes()).hexdigest())
    n_task_docs = sum(e["mix"][k]["documents"] for e in shards.values() for k in e["mix"] if k != CORPUS)
    assert n_task_docs >= 100
    for task_cfg in cfg.mix.tasks:
        task = build_task(task_cfg)
        for split in ("id", "ood"):
            for i in range(256):  # eval.py's algorithmic suite asks examples 0..n-1 of seed 0 (the mix's seed)
                ex = task.example(0, i, split)
                digest = hashlib.sha256(np.asarray(tok.encode(ex.text), dtype=np.int64).tobytes()).hexdigest()
                assert digest not in seen, f"{task.name} {split} example {i} is in the training shards"
    # and the check can fail: a training example is found
    ex = build_task(cfg.mix.tasks[0]).example(0, 2 * EXAMPLES_PER_FILE, "train")
    assert hashlib.sha256(np.asarray(tok.encode(ex.text), dtype=np.int64).tobytes()).hexdigest() in seen


def test_shards_do_not_depend_on_the_worker_count(tmp_path):
    corpus(tmp_path / "corpus")
    one, two = config(tmp_path, MIX, root="one"), config(tmp_path, MIX, root="two")
    tokenize(one, log=lambda *_: None, workers=1)
    tokenize(two, log=lambda *_: None, workers=2)
    a, b = DataLayout.from_config(one).tokens_dir, DataLayout.from_config(two).tokens_dir
    assert a.name == b.name
    assert {p.name: p.read_bytes() for p in a.glob("*.bin")} == {p.name: p.read_bytes() for p in b.glob("*.bin")}


def test_the_mix_is_part_of_the_data_fingerprint(tmp_path):
    corpus(tmp_path / "corpus", n_files=3)
    variants = {"none": config(tmp_path, "data.mix.tasks=[]"), "a": config(tmp_path, MIX),
                "ratio": config(tmp_path, MIX, "data.mix.ratio=0.2"), "seed": config(tmp_path, MIX, "data.mix.seed=1"),
                "task_option": config(tmp_path, MIX.replace("{name: k_back}", "{name: k_back, k: 3}"))}
    dirs, prints = {}, {}
    for key, cfg in variants.items():
        tokenize(cfg, log=lambda *_: None)
        dirs[key] = DataLayout.from_config(cfg).tokens_dir
        prints[key] = build_batch_source(cfg, 32).fingerprint
    assert len(set(dirs.values())) == len(dirs) and len(set(prints.values())) == len(prints)
    assert dirs["none"].name == "bytes" and "-nomix-" in prints["none"]
    assert all(f"-{dirs[k].name.split('_', 1)[1]}-" in prints[k] for k in dirs if k != "none")


def test_resume_onto_shards_of_another_mix_is_refused_naming_both_fingerprints(tmp_path):
    from posbench.config import load_config
    from posbench.training.loop import train

    corpus(tmp_path / "corpus", n_files=3)
    base = [f"data.root={tmp_path / 'data'}", "data.tokenizer.name=bytes", "data.tokenize.workers=1",
            f"data.source={{name: local, paths: ['{tmp_path / 'corpus'}/*']}}",
            "data.splits.filler={start: 1, stop: 2}", "data.splits.train={start: 2, stop: null}",
            "model.size=nano", "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=64",
            "model.vocab_size=512", "model.seq_len=32", "train.budget_unit=tokens", "train.target_budgets=[2048]",
            "train.global_batch_tokens=256", "train.micro_batch=8", f"train.out_dir={tmp_path / 'ck'}",
            "train.run_name=run", "train.eval_interval=0", "logging.wandb=disabled", "train.device=cpu"]
    cfg_a = load_config(overrides=[*base, MIX, "train.max_steps=2"])
    tokenize(cfg_a.data, log=lambda *_: None)
    train(cfg_a, build_batch_source(cfg_a.data, 32))
    cfg_b = load_config(overrides=[*base, MIX, "data.mix.ratio=0.2", "train.resume=auto"])
    tokenize(cfg_b.data, log=lambda *_: None)
    src_a, src_b = build_batch_source(cfg_a.data, 32), build_batch_source(cfg_b.data, 32)
    with pytest.raises(ConfigError, match="differ") as err:
        train(cfg_b, src_b)
    assert src_a.fingerprint in str(err.value) and src_b.fingerprint in str(err.value)
    cfg_a2 = load_config(overrides=[*base, MIX, "train.resume=auto"])  # the same mix continues
    assert train(cfg_a2, build_batch_source(cfg_a2.data, 32))["run_dir"].endswith("run")


@pytest.mark.parametrize("override, message", [
    ("data.mix.tasks=[{name: k_bak}]", "did you mean `k_back`"),
    ("data.mix.ratio=1.0", "must be in [0, 1)"),
    ("data.mix.ratio=-0.1", "must be in [0, 1)"),
    ("data.mix.tasks=[{name: sort}, {name: sort}]", "twice"),
    ("data.mix.tasks=[{name: reverse, id_range: [9, 3]}]", "low > high"),
])
def test_bad_mix_stops_before_any_work(tmp_path, override, message):
    corpus(tmp_path / "corpus", n_files=3)
    args = ["tokenize", f"data.root={tmp_path / 'data'}", "data.tokenizer.name=bytes",
            f"data.source={{name: local, paths: ['{tmp_path / 'corpus'}/*']}}", override]
    p = subprocess.run([sys.executable, "-m", "posbench.data.prepare_fineweb", *args], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert not (tmp_path / "data").exists()  # nothing written
