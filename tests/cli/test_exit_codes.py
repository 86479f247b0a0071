"""One exit code per kind of failure, whatever the command (a design rule; posbench/errors.py):

    2 bad input    3 training diverged    4 bad checkpoint    5 disk full

The same damaged checkpoints (model.pt truncated, a pickle whose __reduce__ would run a command, a tensor of
the wrong shape; meta.json and config.yaml damaged; a YAML alias bomb as config.yaml; NaN weights) go to
`train --resume`, `eval`, `export` and `lm-eval`: each exits 4 with one line `error: ...` naming the file,
without torch's internals, without torch's advice to load with weights_only=False, and without running the
pickle's code. Each command runs every case in one subprocess (`posbench.cli.main.main`, in process), so the
table costs one interpreter start per command.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
NANO = ["--model-size", "nano", "model.seq_len=64", "model.vocab_size=512", "data.tokenizer.name=bytes",
        "train.stream=random", "train.budget_unit=tokens", "train.global_batch_tokens=512", "train.micro_batch=2",
        "logging.wandb=disabled", "schedule.warmup_tokens=0"]
STEP = "r/step_00000002"
MARKER = "pwned"  # the file the malicious pickle would create


class Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _truncated(step: Path) -> None:
    raw = (step / "model.pt").read_bytes()
    (step / "model.pt").write_bytes(raw[: len(raw) // 2])


def _pickle_zip(step: Path) -> None:  # torch's own zip format, a pickle inside
    torch.save({"w": Evil(step.parents[1] / MARKER)}, step / "model.pt")


def _pickle_raw(step: Path) -> None:  # a bare pickle file
    with open(step / "model.pt", "wb") as f:
        pickle.dump({"w": Evil(step.parents[1] / MARKER)}, f)


def _shape(step: Path) -> None:
    state = torch.load(step / "model.pt", weights_only=True)
    state["tok_emb.weight"] = torch.zeros(3, 3)
    torch.save(state, step / "model.pt")


def _nan(step: Path) -> None:
    state = torch.load(step / "model.pt", weights_only=True)
    state["tok_emb.weight"][0, 0] = float("nan")
    torch.save(state, step / "model.pt")


def _meta(step: Path) -> None:
    (step / "meta.json").write_text('{"step": 2,\n\n')


def _config(step: Path) -> None:
    (step / "config.yaml").write_text("model: [1\n")


def _config_bomb(step: Path) -> None:
    levels = ["&a0 [" + ",".join(["lol"] * 10) + "]"] + [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]"
                                                         for i in range(1, 10)]
    (step / "config.yaml").write_text(f"model:\n  d_model: [{', '.join(levels)}]\n")


# damaged checkpoint -> (the file the message names, what it says)
DAMAGED = {
    "truncated": (_truncated, "model.pt", "cannot be read as model weights: the file is truncated"),
    "pickle_zip": (_pickle_zip, "model.pt", "holds Python objects other than tensors, refused unread"),
    "pickle_raw": (_pickle_raw, "model.pt", "holds Python objects other than tensors, refused unread"),
    "shape": (_shape, "model.pt", "does not match the model its config.yaml describes: tok_emb.weight is (3, 3)"),
    "nan": (_nan, "model.pt", "checkpoint holds non-finite weights: tok_emb.weight"),
    "meta": (_meta, "meta.json", "not valid JSON"),
    "config": (_config, "config.yaml", "not valid YAML"),
    "config_bomb": (_config_bomb, "config.yaml", "refused: its anchors and aliases expand to more than"),
}
COMMANDS = {
    "train": lambda d: ["train", *NANO, "train.target_budgets=[2048]", f"train.out_dir={d}", "train.run_name=r",
                        "--resume", f"{d}/{STEP}"],
    "eval": lambda d: ["eval", f"{d}/{STEP}", "--suite", "ppl", "--ppl-text", f"{d}/../text.txt", "--out",
                       f"{d}/ev", "--no-progress", "--device", "cpu"],
    "export": lambda d: ["export", f"{d}/{STEP}", f"{d}/hf"],
    # `pretrained=`, the harness's usual name, is `checkpoint=` (tests/interop/test_lm_eval_model.py uses that one)
    "lm-eval": lambda d: ["lm-eval", "--model", "posbench", "--model_args", f"pretrained={d}/{STEP}", "--tasks",
                          "lambada_openai", "--device", "cpu", "--limit", "1"],
}
# the other kinds, where a command has them: (argv builder, env, code, text)
OTHER = {
    "train": {
        "bad_input": (lambda d: ["train", *NANO, "model.d_modle=1"], {}, 2, "unknown config key `model.d_modle`"),
        "diverged": (lambda d: ["train", *NANO, "train.target_budgets=[1024]", f"train.out_dir={d}"],
                     {"POSBENCH_INJECT_NAN": "1,0"}, 3, "non-finite loss"),
        "disk_full": (lambda d: ["train", *NANO, "train.target_budgets=[1024]", f"train.out_dir={d}"],
                      {"POSBENCH_ENOSPC_DURING_SAVE": "2"}, 5, "disk full"),
    },
    "eval": {"bad_input": (lambda d: ["eval", f"{d}/{STEP}", "--lengths", "abc"], {}, 2, "lengths[0]")},
    "export": {"missing": (lambda d: ["export", f"{d}/nowhere", f"{d}/hf"], {}, 4, "no such checkpoint")},
    "lm-eval": {"bad_input": (lambda d: ["lm-eval", "--model", "posbench", "--model_args", "max_length=64", "--tasks",
                                         "lambada_openai"], {}, 2, "name the checkpoint")},
    # the commands that take no checkpoint: a config they read that is an alias bomb
    "study": {"bad_input": (lambda d: ["study", f"{d}/bomb.yaml", "--out", f"{d}/st"], {}, 2, "refused")},
    "sweep": {"bad_input": (lambda d: ["sweep", f"{d}/bomb.yaml", "--out", f"{d}/sw"], {}, 2, "refused")},
    "data": {"bad_input": (lambda d: ["data", "info", f"{d}/bomb.yaml"], {}, 2, "refused")},
}

DRIVER = textwrap.dedent("""
    import contextlib, io, json, os, resource, sys, traceback
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # the alias bomb must not take the machine down
    from posbench.cli.main import main

    out = {}
    for name, (argv, env) in json.loads(sys.argv[1]).items():
        saved = dict(os.environ)
        os.environ.update(env)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
            except BaseException:  # a bug: the traceback is the finding
                traceback.print_exc()
                code = 1
        os.environ.clear()
        os.environ.update(saved)
        out[name] = [code, err.getvalue()]
    print("RESULTS " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A nano run of two steps (the checkpoint every case damages in its own copy) and a text to score."""
    root = tmp_path_factory.mktemp("exit_codes")
    proc = subprocess.run([sys.executable, "-m", "posbench", "train", *NANO, "train.target_budgets=[1024]",
                           f"train.out_dir={root}", "train.run_name=r"], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    (root / "text.txt").write_text("plain words in a line of text. " * 100)
    return root


def run_cases(root: Path, cases: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "POSBENCH_DEBUG": "0", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], cwd=root, capture_output=True,
                          text=True, timeout=600, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULTS "))


@pytest.mark.parametrize("command", list(OTHER))
def test_every_kind_of_failure_has_one_exit_code_in_every_command(trained, tmp_path, command):
    if command == "export":
        pytest.importorskip("transformers")
    if command == "lm-eval":
        pytest.importorskip("lm_eval")
    cases, expected = {}, {}
    for name, (damage, file, text) in DAMAGED.items() if command in COMMANDS else ():
        d = tmp_path / name
        shutil.copytree(trained / "r", d / "r", symlinks=True)
        shutil.copy(trained / "text.txt", tmp_path / "text.txt")
        damage(d / STEP)
        cases[name] = [COMMANDS[command](str(d)), {}]
        expected[name] = (4, [f"{d / STEP / file}", text])
    for name, (argv, env, code, text) in OTHER[command].items():
        d = tmp_path / name
        shutil.copytree(trained / "r", d / "r", symlinks=True)
        _config_bomb(d)  # d/config.yaml
        (d / "config.yaml").rename(d / "bomb.yaml")
        cases[name] = [argv(str(d)), env]
        expected[name] = (code, [text])
    results = run_cases(tmp_path, cases)
    for name, (code, texts) in expected.items():
        got, err = results[name]
        lines = err.strip().splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        where = f"{command} {name}: exit {got}\n{err[-3000:]}"
        assert got == code, where
        assert "Traceback" not in err and len(errors) == 1 and lines[-1] == errors[0], where
        if name in DAMAGED and command != "lm-eval":  # (the harness logs its own lines before ours)
            assert len(lines) == 1, where
        assert all(t in errors[0] for t in texts) and errors[0].count(texts[0]) == 1, where  # the path once
        for internal in ("weights_only", "PytorchStreamReader", "central directory", "Unpickler", "torch.Size",
                         "Error(s) in loading", "please report this as a bug"):
            assert internal not in err, where
        assert len(errors[0]) < 400, where
    assert not list(tmp_path.rglob(MARKER)), "the pickle's code ran"


def test_the_guides_error_example_is_what_train_prints(tmp_path):
    text = (ROOT / "docs" / "guide.md").read_text()
    shown = text.split("$ posbench train model.d_modle=256\n", 1)[1].split("\n```", 1)[0].strip()
    proc = subprocess.run([sys.executable, "-m", "posbench", "train", "model.d_modle=256"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "POSBENCH_DEBUG": "0"})
    assert proc.returncode == 2 and proc.stderr.strip() == shown
