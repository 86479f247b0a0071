"""The remote-code parity table: every name in posbench's PE registry, with its default options, through posbench
and through the exported remote class on the same weights (a seeded nano model, every weight perturbed). Untied
embeddings keep every PE, RoPE and NoPE included, off the Qwen3 path, so each one meets the remote code. Each PE
either exports with parity (fp32 logits within 1e-5 of the largest |logit|; transformers' greedy generate with
its KV cache == without it == posbench's greedy loops) or is refused before anything is written, with its reason:
the data's own position ids (abacus, coupled), or no class in the remote code (a PE added in one file). A new PE
is covered as soon as it is registered. test_hf_export_remote.py holds the option variants (scalings, windows,
packing, padding)."""

import inspect
import re
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posbench.config_loader import ConfigError  # noqa: E402
from posbench.evaluation.generate import supports_cache  # noqa: E402
from posbench.evaluation.loading import load_model  # noqa: E402
from posbench.interop.hf_export import REMOTE, export  # noqa: E402
from posbench.interop.hf_remote.modeling_posbench import PE_CLASSES  # noqa: E402
from posbench.pe import PES  # noqa: E402
from tests.interop.test_hf_export import assert_generation_parity  # noqa: E402
from tests.interop.test_hf_export_remote import assert_remote_files_stand_alone, random_checkpoint  # noqa: E402

# Qwen3 ties its head: every PE goes through the remote code; 4 layers, the fewest every PE's defaults take
# (hybrid's 4-entry pattern, RNoPE-SWA's 3 windowed layers and a full one)
OVERRIDES = ["model.tie_embeddings=false", "model.n_layers=4"]
# RNoPE-SWA's window inside the 80 ids compared here, so its windowed layers are exercised; its default 4,096 would
# make the export's own check run 4,128 ids (it crosses every window and chunk: interop/hf_verify.check_length)
PE_OVERRIDES = {"rnope_swa": ["pe.window=48"]}
LOGIT_TOLERANCE = 1e-5  # of the largest |logit|: fp32 kernel noise is ~1e-7 of it, a wrong bias far above

# what the remote code implements today: it may gain names, never lose one silently
SHIPPED_REMOTE = {"alibi", "binary", "binary_norm", "cable", "cope", "decimal", "decimal_norm", "drope", "fire",
                  "fope", "fox", "hope", "hybrid", "integer", "kerple_log", "kerple_power", "learned", "lrope",
                  "modded_rope", "none", "path", "pope", "prope", "randomized", "relative_learned", "rnope_swa", "rope",
                  "sininit", "sinonly", "sinusoidal", "stick_breaking", "t5", "xpos"}


DATA_POSITIONS = {"abacus", "coupled"}  # read a task's per-token ids, which generate() cannot hand a model


def refusal(name: str) -> str | None:
    """The reason the export must give for refusing PE `name`, or None when it must export it. The PEs shipped are
    pinned (the remote code implements SHIPPED_REMOTE, the DATA_POSITIONS ones are refused); any other name, a PE
    added since, by posbench's contract (it reads the data's position ids) and the remote code's registry."""
    if name in SHIPPED_REMOTE:
        return None
    if name in DATA_POSITIONS or PES.get(name).reads_data_positions():
        return f"PE `{name}` takes its positions from the data"
    if name not in PE_CLASSES:
        return f"positional encoding `{name}` has no class in posbench's remote code"
    return None


def assert_exports_with_parity(tmp_path: Path, run: Path):
    out = export(run, tmp_path / "hf", log=lambda *_: None)
    assert_remote_files_stand_alone(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True).eval()
    assert type(hf).__name__ == REMOTE
    ours = load_model(run, "cpu").model
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


def test_the_remote_code_keeps_every_pe_it_implements():
    assert SHIPPED_REMOTE <= set(PE_CLASSES) & set(PES.names())


# the remote code's own needs: config dicts checked field by field, and transformers' left-padded batches
REMOTE_ONLY = {"check_config", "pads_ok", "name"}
PER_ROW = {"positions"}  # posbench's name, taking each row's token indices (left padding) for (T, device, offset)


def parameters(fn) -> list[str]:
    """A hook's parameter names without their shape suffixes (pos_q_T and pos_q_BT are both pos_q)."""
    names = [p for p in inspect.signature(fn).parameters if p != "self"]
    return [re.sub(r"_[BHTSKDFR]+$", "", p) for p in names]


def test_the_remote_contract_has_posbench_hook_names_and_parameters():
    """Every hook of the remote contract is one of posbench's, by name and by parameters (shapes per row aside); the
    bias family's `bias` likewise. Fails when either side renames a hook the other keeps."""
    from posbench.interop.hf_remote import pe_bias, pe_contract
    from posbench.pe.bias import BiasPE
    from posbench.pe.encoding import PositionalEncoding

    remote = {name: value for name, value in vars(pe_contract.PositionalEncoding).items()
              if not name.startswith("_") and (callable(value) or isinstance(value, (property, classmethod)))}
    assert set(remote) - REMOTE_ONLY <= set(dir(PositionalEncoding)), set(remote) - REMOTE_ONLY - set(
        dir(PositionalEncoding))
    for name, value in remote.items():
        if name in REMOTE_ONLY | PER_ROW or isinstance(value, property):
            continue
        ours = getattr(PositionalEncoding, name)
        assert parameters(value) == parameters(ours), name
    assert parameters(pe_bias.BiasPE.bias) == parameters(BiasPE.bias)
    assert parameters(pe_bias.BiasPE.score_mod) == parameters(BiasPE.score_mod)
