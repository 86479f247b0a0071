import json
import os
import random
import signal
from pathlib import Path

import pytest
import torch

from posbench.config import load_config
from posbench.errors import ConfigError
from posbench.model.kernels import select_kernel
from posbench.model.transformer import Transformer

TESTS = Path(__file__).resolve().parent
# The smoke tier (`pytest tests -m "smoke and not slow" -n 2`, under a minute on 2 cores), for the edit-test loop:
# the contracts an edit most often breaks (PE hooks, the kernels' plan and parity, tasks, configs, statistics,
# the loop's stop-and-resume, shards, import direction). The fast tier (the README's) runs everything not slow.
SMOKE = {
    "pe/test_pe_contract.py", "pe/test_pe_hooks.py", "pe/test_pe_reference.py", "pe/test_pe_reference_rotary.py",
    "model/test_attention_plan.py", "model/test_bias_attention.py", "model/test_kernels.py", "model/test_packing.py",
    "tasks/test_task_contract.py", "tasks/test_task_solvers.py", "tasks/test_arithmetic.py",
    "core/test_config.py", "core/test_registry.py", "core/test_stats_calibration.py", "studies/test_claims.py",
    "training/test_schedule.py", "training/test_optim_groups.py", "training/test_function_length.py",
    "training/test_loop.py", "data/test_shards.py", "data/test_loader.py", "evaluation/test_effective_length.py",
    "repo/test_import_direction.py",
}


def pytest_configure(config):
    """Under `-n N` (pytest-xdist), each of the N worker processes gets its share of torch's intra-op threads.
    torch's default is one thread per core in every process, so N workers oversubscribe the cores N times, and
    OpenMP's spin-waiting then slows every in-process torch test several-fold (2 workers on 2 shared cores: the
    model packing and bias-attention files took 203-249 s at the default, 45 s at one thread each). The
    subprocesses the tests start inherit the share through OMP_NUM_THREADS unless a test sets its own (posbench's
    `auto` is one thread either way, posbench/threads.py); a serial run (`-n 0`) keeps torch's default."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = max(1, torch.get_num_threads() // workers)
        torch.set_num_threads(share)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(item.fspath).resolve().relative_to(TESTS).as_posix() in SMOKE:
            item.add_marker(pytest.mark.smoke)


# Per-PE options for the small contract-test model (4 layers so the default hybrid pattern fits).
TEST_PE_OVERRIDES = {
    "fire": ["pe.threshold_init=4"],
    "randomized": ["pe.max_positions=256"],
    # TAPE's authors zero W_up and the attention update at init (an untrained TAPE is RoPE, its other update
    # weights get no gradient at step 0): the contract runs it trained-like, every update live
    "tape": ["pe.zero_init=false"],
    # SeqPE's logit term at the authors' init is ~1e-4 (two 0.02-std maps of a unit-RMS vector): the authors'
    # seqpe_scalar_scale makes it visible to the contract's absolute-PE check
    "seqpe": ["pe.scalar_scale=2000"],
}


def build_test_model(pe_name: str, seed: int = 0, overrides=(), loss_chunk_tokens: int | None = None,
                     **model_kw) -> Transformer:
    torch.manual_seed(seed)
    dims = dict(size="test", d_model=32, n_layers=4, n_heads=4, d_ff=64, seq_len=64, vocab_size=61)
    ov = [f"model.{k}={v}" for k, v in {**dims, **model_kw}.items()]
    cfg = load_config(overrides=ov + TEST_PE_OVERRIDES.get(pe_name, []) + list(overrides), pe_type=pe_name)
    return Transformer(cfg.model, cfg.pe, loss_chunk_tokens=loss_chunk_tokens)


def decode_in_parts(model, idx, prompt: int, singles: int):
    """(logits through the KV cache, the cache): `idx[:, :prompt]` at once, then `singles` tokens one at a time,
    then the rest at once (several new tokens after cached ones), without grad; compare with `model(idx)`."""
    with torch.no_grad():
        cache = model.new_cache()
        parts = [model(idx[:, :prompt], cache=cache).logits]
        parts += [model(idx[:, t:t + 1], cache=cache).logits for t in range(prompt, prompt + singles)]
        parts += [model(idx[:, prompt + singles:], cache=cache).logits]
    return torch.cat(parts, dim=1), cache


WORDS = "the of and to in is was for on that with as by at from it an be this are".split()


def write_word_corpus(folder: Path, n_files: int, docs_per_file: int, words: tuple[int, int], seed: int = 0) -> Path:
    """`n_files` jsonl files of random-word documents (lengths uniform in `words`), one RNG for all files."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for f in range(n_files):
        lines = [json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(*words)))})
                 for _ in range(docs_per_file)]
        (folder / f"part{f}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def catch_saved_figures(monkeypatch, module) -> dict:
    """Wrap `module._save(fig, path, ...)` so a test can read the matplotlib figures it saved, by file name."""
    caught = {}
    save = module._save

    def keep(fig, path, *args, **kwargs):
        caught[path.name] = fig
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(module, "_save", keep)
    return caught


def assert_eager_only(pe) -> None:
    """A PE that rewrites whole rows of logits (logits_mod) runs on the eager kernel only: auto picks it on every
    device, flex and sdpa refuse it by name."""
    assert select_kernel("auto", pe, "cuda").name == "eager" and select_kernel("auto", pe, "cpu").name == "eager"
    with pytest.raises(ConfigError, match="logits_mod"):
        select_kernel("flex", pe, "cuda")
    with pytest.raises(ConfigError, match="adds a logit bias"):
        select_kernel("sdpa", pe, "cpu")


def as_from_a_terminal():
    """In the child before exec: SIGINT's disposition and the signal mask as a command typed at a terminal gets them.
    A child inherits an ignored SIGINT or a blocked mask from whatever started the test run (a non-interactive
    shell runs background jobs with SIGINT ignored; CI's runner is one), and Python then never installs its Ctrl-C
    handler: the test would measure the launcher, not the command."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def terminal_sigint():
    """This process's SIGINT as Python sets it for a command typed at a terminal (KeyboardInterrupt), for the test:
    the in-process form of as_from_a_terminal, for a test that sends SIGINT to itself."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
