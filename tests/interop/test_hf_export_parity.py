"""The remote-code parity table: every name in posbench's PE registry, with its default options, through posbench
and through the exported remote class on the same weights (a seeded nano model, every weight perturbed). Untied
embeddings keep every PE, RoPE and NoPE included, off the Qwen3 path, so each one meets the remote code, which is
posbench's own PE modules written beside the decoder shell (interop/hf_zoo.py). Each PE either exports with parity
(fp32 logits within 1e-5 of the largest |logit|; transformers' greedy generate with its KV cache == without it ==
posbench's greedy loops), its PE an instance of the shipped copy of its own posbench class, or is refused before
anything is written, with its reason: the data's own position ids (abacus, coupled). A new PE is covered as soon as
it is registered. test_hf_export_remote.py holds the option variants (scalings, windows, packing, padding)."""

import re
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posbench.config_loader import ConfigError  # noqa: E402
from posbench.evaluation.generate import supports_cache  # noqa: E402
from posbench.evaluation.loading import load_model  # noqa: E402
from posbench.interop.hf_export import export  # noqa: E402
from posbench.interop.hf_posbench import REMOTE  # noqa: E402
from posbench.interop.hf_refusals import UNTHREADED_HOOKS  # noqa: E402
from posbench.pe import PES  # noqa: E402
from posbench.pe.encoding import overrides  # noqa: E402
from posbench.pe.wrapper import WrapperPE  # noqa: E402
from tests.interop.test_hf_export import assert_generation_parity  # noqa: E402
from tests.interop.test_hf_export_remote import assert_remote_files_stand_alone, random_checkpoint  # noqa: E402

# Qwen3 ties its head: every PE goes through the remote code; 4 layers, the fewest every PE's defaults take
# (hybrid's 4-entry pattern, RNoPE-SWA's 3 windowed layers and a full one)
OVERRIDES = ["model.tie_embeddings=false", "model.n_layers=4"]
# RNoPE-SWA's window inside the 80 ids compared here, so its windowed layers are exercised; its default 4,096 would
# make the export's own check run 4,128 ids (it crosses every window and chunk: interop/hf_verify.check_length)
PE_OVERRIDES = {"rnope_swa": ["pe.window=48"]}
LOGIT_TOLERANCE = 1e-5  # of the largest |logit|: fp32 kernel noise is ~1e-7 of it, a wrong bias far above

DATA_POSITIONS = {"abacus", "coupled"}  # read a task's per-token ids, which generate() cannot hand a model
UNTHREADED = {"repo": "`token_positions`", "tape": "`start_state`"}  # hooks the exported decoder shell lacks


def refusal(name: str) -> str | None:
    """The reason the export must give for refusing PE `name`, or None when it must export it: the PEs that read
    the data's position ids, pinned (DATA_POSITIONS) and, for a PE added since, by posbench's contract."""
    if name in DATA_POSITIONS or PES.get(name).reads_data_positions():
        return f"PE `{name}` takes its positions from the data"
    pe = PES.get(name)
    if issubclass(pe, WrapperPE):  # a wrapper forwards every hook to its inner PE, which is judged on its own
        return None
    hook = UNTHREADED.get(name) or next((f"`{h}`" for h in UNTHREADED_HOOKS if overrides(pe, h)), None)
    return None if hook is None else f"({hook}), which the exported model's decoder shell does not thread"


def assert_pe_is_shipped_posbench(hf, ours):
    """Every PE module of the exported model is an instance of the shipped copy of its posbench class: same class
    name, defined in the flat file the export wrote for the posbench module (interop/hf_zoo.py)."""
    from posbench.interop.hf_zoo import flat_name
    from posbench.pe import PositionalEncoding

    # the PE modules (a hybrid's members, a wrapper's inner PE), not their torch parts (tables, lists)
    theirs = [m for m in hf.pe.modules() if hasattr(m, "layer_pe")]
    mine = [m for m in ours.pe.modules() if isinstance(m, PositionalEncoding)]
    assert mine and len(theirs) == len(mine)
    for got, want in zip(theirs, mine, strict=True):
        assert type(got).__name__ == type(want).__name__
        assert type(got).__module__.startswith("transformers_modules.")
        assert type(got).__module__.rsplit(".", 1)[1] == flat_name(type(want).__module__)


def assert_exports_with_parity(tmp_path: Path, run: Path):
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    assert_remote_files_stand_alone(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True).eval()
    assert type(hf).__name__ == REMOTE
    ours = load_model(run, "cpu").model
    assert_pe_is_shipped_posbench(hf, ours)
    T = min(80, ours.pe.max_positions or 80)  # past the training length 64 where the PE is defined there
    ids = torch.randint(0, 257, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = ours(ids).logits, hf(ids).logits
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= LOGIT_TOLERANCE * want.abs().max().item()
    assert_generation_parity(hf, ours, ids[0, :12].tolist(), 12, cache=supports_cache(ours))


def assert_refused(tmp_path: Path, run: Path, reason: str):
    with pytest.raises(ConfigError, match=re.escape(reason)) as refused:
        export(run, tmp_path / "hf", log=lambda *_: None)
    assert "Nothing was exported" in str(refused.value)
    assert not (tmp_path / "hf").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]


@pytest.mark.parametrize("name", PES.names())
def test_every_registered_pe_exports_with_parity_or_is_refused_with_its_reason(tmp_path, name):
    run = random_checkpoint(tmp_path, f"pe.name={name}", *OVERRIDES, *PE_OVERRIDES.get(name, []))
    reason = refusal(name)
    if reason:
        assert_refused(tmp_path, run, reason)
    else:
        assert_exports_with_parity(tmp_path, run)
