import json
import random
from pathlib import Path

import torch

from posbench.config import load_config
from posbench.model.transformer import Transformer

# Per-PE options for the small contract-test model (4 layers so the default hybrid pattern fits).
TEST_PE_OVERRIDES = {
    "fire": ["pe.threshold_init=4"],
    "randomized": ["pe.max_positions=256"],
}


def build_test_model(pe_name: str, seed: int = 0, overrides=(), loss_chunk_tokens: int | None = None,
                     **model_kw) -> Transformer:
    torch.manual_seed(seed)
    dims = dict(size="test", d_model=32, n_layers=4, n_heads=4, d_ff=64, seq_len=64, vocab_size=61)
    ov = [f"model.{k}={v}" for k, v in {**dims, **model_kw}.items()]
    cfg = load_config(overrides=ov + TEST_PE_OVERRIDES.get(pe_name, []) + list(overrides), pe_type=pe_name)
    return Transformer(cfg.model, cfg.pe, loss_chunk_tokens=loss_chunk_tokens)


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
