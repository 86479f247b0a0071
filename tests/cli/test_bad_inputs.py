"""The bad-input table: each bad input gives one line `error: ...` naming the file or key, a documented
non-zero exit code (2; 4 for a checkpoint that is not one), no traceback, and nothing written."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
NANO = ["--model-size", "nano", "model.seq_len=64", "model.vocab_size=512", "data.tokenizer.name=bytes",
        "train.stream=random", "train.budget_unit=tokens", "train.target_budgets=[1024]",
        "train.global_batch_tokens=512", "train.micro_batch=2", "logging.wandb=disabled", "schedule.warmup_tokens=0"]


def _yaml(tmp):
    (tmp / "bad.yaml").write_text("model: [1\n")
    return ["train.py", "bad.yaml", "--print-config"]


def _binary(tmp):
    (tmp / "blob.yaml").write_bytes(bytes(range(256)) * 4)
    return ["train.py", "blob.yaml", "--print-config"]


def _override(tmp):
    return ["train.py", "model.d_model=[1", "--print-config"]


def _list_model(tmp):
    step = tmp / "ck" / "step_00000001"
    step.mkdir(parents=True)
    torch.save([1, 2], step / "model.pt")
    (step / "config.yaml").write_text("seed: 1\n")
    return ["eval.py", "ck/step_00000001", "--suite", "ppl", "--out", "ev"]


def _empty_identity(tmp):
    (tmp / "o" / "r").mkdir(parents=True)
    (tmp / "o" / "r" / "identity.json").write_text("")
    return ["train.py", *NANO, "train.out_dir=o", "train.run_name=r"]


def _out_dir_under_file(tmp):
    (tmp / "f").write_text("a regular file")
    return ["train.py", *NANO, "train.out_dir=f/sub"]


def _study_yaml(tmp):
    (tmp / "s.yaml").write_text("name: x\ncells: {\n")
    return ["scripts/study.py", "s.yaml", "--out", "st"]


def _describe_override(tmp):
    return ["scripts/describe_model.py", "--model-size", "nano", "pe.name=[rope", "--device", "cpu"]


def _prepare_yaml(tmp):
    (tmp / "d.yaml").write_text("data: {source: [\n")
    return ["-m", "posbench.data.prepare_fineweb", "info", "d.yaml"]


def _tokenized(tmp):
    """A local corpus tokenized here with the bytes tokenizer: (data config, its overrides for train.py)."""
    from posbench.config import load_config
    from posbench.data.tokenize_shards import tokenize

    (tmp / "corpus").mkdir()
    for f in range(3):
        (tmp / "corpus" / f"p{f}.txt").write_text((f"plain words in line {f} of text. " * 40 + "\n\n") * 8)
    data = [f"data.root={tmp / 'data'}", "data.tokenizer.name=bytes", "data.mix.tasks=[]",
            "data.source={name: local, paths: ['" + str(tmp / "corpus") + "/*.txt']}",
            "data.splits={val: {start: 0, stop: 1}, filler: {start: 1, stop: 2}, train: {start: 2, stop: null}}"]
    cfg = load_config(overrides=data).data
    tokenize(cfg, log=lambda *_: None)
    return cfg, data


def _corrupt_shard(tmp):
    """Shards tokenized here, then one id in a train shard's body raised past the vocabulary (header intact)."""
    from posbench.data.layout import DataLayout
    from posbench.data.shards import HEADER_BYTES

    cfg, data = _tokenized(tmp)
    (shard,) = DataLayout.from_config(cfg).tokens_dir.glob("train_*.bin")
    raw = bytearray(shard.read_bytes())
    raw[HEADER_BYTES + 2 * 300:HEADER_BYTES + 2 * 301] = (400).to_bytes(2, "little")  # bytes vocab: 257 ids
    shard.write_bytes(bytes(raw))
    return ["train.py", *NANO, *data, "train.stream=shards", "train.out_dir=o"]


def _val_vocab(tmp):
    """Shards tokenized here, then the val shard's header claims a vocabulary larger than the model's: refused before
    training (it failed with an IndexError at the first validation)."""
    import numpy as np

    from posbench.data.layout import DataLayout

    cfg, data = _tokenized(tmp)
    (shard,) = DataLayout.from_config(cfg).tokens_dir.glob("val_*.bin")
    raw = bytearray(shard.read_bytes())
    raw[5 * 4:6 * 4] = np.array([600], dtype="<i4").tobytes()  # header int32[5]: the vocabulary size
    shard.write_bytes(bytes(raw))
    return ["train.py", *NANO, *data, "train.stream=shards", "train.out_dir=o"]


# case -> (command builder, exit code, text the one line must contain)
CASES = {
    "malformed_yaml": (_yaml, 2, "error: bad.yaml: not valid YAML: expected ',' or ']'"),
    "binary_config": (_binary, 2, "error: blob.yaml: not a UTF-8 text file"),
    "bad_override": (_override, 2, "error: override `model.d_model`: value `[1` is not valid YAML"),
    "model_pt_list": (_list_model, 4, "model.pt: holds a list, not a state dict of tensors"),
    "empty_identity": (_empty_identity, 2, "identity.json is empty or not JSON"),
    "out_dir_under_file": (_out_dir_under_file, 2, "error: [Errno 20] Not a directory: 'f/sub/"),
    "study_yaml": (_study_yaml, 2, "s.yaml: not valid YAML"),
    "describe_override": (_describe_override, 2, "override `pe.name`: value `[rope` is not valid YAML"),
    "prepare_yaml": (_prepare_yaml, 2, "d.yaml: not valid YAML"),
    "corrupt_shard": (_corrupt_shard, 2, "train_00002.bin: token id 400 >= vocab size 257 at token 300;"),
    "val_vocab": (_val_vocab, 2, "the val token shards use a vocabulary of 600 but model.vocab_size is 512"),
    "table_shorter_than_window": (lambda tmp: ["train.py", *NANO, "--pe-type", "learned", "pe.max_positions=32",
                                               "train.out_dir=o"], 2,
                                  "training asks PE `learned` for 64 positions (model.seq_len, or the data's own "
                                  "position ids), but it is defined for 0..31: give pe.max_positions=64 or more"),
    "bos_beyond_vocab": (lambda tmp: ["train.py", *NANO, "model.packing.bos_id=512", "--print-config"], 2,
                         "model.packing.bos_id=512 is not a token of the model's vocabulary"),
    "fope_gain_inf": (lambda tmp: ["train.py", *NANO, "--pe-type", "fope", "pe.fourier_gain=.inf", "--print-config"],
                      2, "pe.fourier_gain must be a finite number >= 0, got inf"),
    "cope_npos_huge": (lambda tmp: ["train.py", *NANO, "--pe-type", "cope", "pe.npos_max=1000000000",
                                    "--print-config"], 2, "pe.npos_max=1,000,000,000 is beyond 1,048,576"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_error(tmp_path, case):
    build, code, text = CASES[case]
    args = build(tmp_path)
    script = args if args[0] == "-m" else [str(ROOT / args[0]), *args[1:]]
    before = sorted(p for p in tmp_path.rglob("*"))
    env = {**os.environ, "POSBENCH_DEBUG": "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, *script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == code, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], proc.stderr
    after = sorted(p for p in tmp_path.rglob("*") if "__pycache__" not in p.parts)
    assert after == before  # nothing written, nothing lost


def test_debug_flag_shows_the_traceback(tmp_path):
    (tmp_path / "bad.yaml").write_text("model: [1\n")
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "bad.yaml", "--debug"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback (most recent call last)" in proc.stderr and proc.stderr.strip().endswith(
        "error: bad.yaml: not valid YAML: expected ',' or ']', but got '<stream end>' (line 2, column 1)")
