"""AdamW's parameter groups: FoX's forget-gate weight is decayed as its authors decay it
(zhixuan-lin/forgetting-transformer, src/forgetting_transformer/utils.py `group_parameters`: every nn.Linear weight,
the gate's `fgate_proj` included; biases exempt), and every other PE keeps the groups it had before PEs could
list parameters to decay (`decay_params`), held to that rule written out here."""

import pytest
import torch

from posbench.config import load_config
from posbench.model.build import build_model
from posbench.pe import PES
from posbench.training.optim import param_groups
from tests.conftest import build_test_model


def groups_by_id(model):
    decay, no_decay = param_groups(model, 0.1)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    return [id(p) for p in decay["params"]], [id(p) for p in no_decay["params"]]


def rule_before(model):
    """The groups before `decay_params`: matrices decay, except PE parameters and those marked `_no_weight_decay`."""
    pe = {id(p) for p in model.pe.parameters()}
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            keep = p.ndim >= 2 and id(p) not in pe and not getattr(p, "_no_weight_decay", False)
            (decay if keep else no_decay).append(id(p))
    return decay, no_decay


@pytest.mark.parametrize("name", ["fox", "cable"])  # CABLE: tensors of dim >= 2 decay (axiomlab/Cable line 207)
def test_fox_decays_its_gate_weight_and_not_its_bias(name):
    model = build_test_model(name)
    decay, no_decay = groups_by_id(model)
    assert id(model.pe.weight_LHD) in decay
    assert id(model.pe.bias_LH) in no_decay  # a 2-D (L, H) tensor, still a bias: exempt as the authors'
    want_decay, want_no = rule_before(model)
    assert decay == [i for i in [id(p) for p in model.parameters()] if i in set(want_decay) | {id(model.pe.weight_LHD)}]
    assert set(no_decay) == set(want_no) - {id(model.pe.weight_LHD)}


def test_a_fox_member_of_a_hybrid_is_decayed_too():
    model = build_test_model("hybrid", overrides=["pe.pattern=[{name: fox}, {name: rope}]"])
    fox = model.pe.members[0]
    decay, no_decay = groups_by_id(model)
    assert id(fox.weight_LHD) in decay and id(fox.bias_LH) in no_decay


def test_repo_decays_its_three_projection_weights_as_their_adamw():
    """SakanaAI/repo OLMo2-1B-stage2-seed42-SEXMH-L5.yaml: weight_decay 0.1 on every Linear weight, W_g, W_c and W_z
    of the re-positioning network (no biases) included."""
    model = build_test_model("repo")
    decay, no_decay = groups_by_id(model)
    mine = [model.pe.gate_RMD, model.pe.content_RMD, model.pe.final_RHM]
    assert all(id(p) in decay for p in mine) and not {id(p) for p in mine} & set(no_decay)
    want_decay, want_no = rule_before(model)
    ids = {id(p) for p in mine}
    assert set(decay) == set(want_decay) | ids and set(no_decay) == set(want_no) - ids


# Their authors' optimizers decay every PE parameter: GRAPE's all but RMSNorm weights (model-architectures/GRAPE
# optim_utils.py lines 8-30), Selective RoPE's all (timurcarstensen/selective-rope train_language_modeling.py 531-538)
DECAY_ALL = ["grape_a", "grape_ap", "grape_m", "grape_m_ctx", "selective_rope"]


@pytest.mark.parametrize("name", DECAY_ALL)
def test_pes_whose_authors_decay_every_parameter_decay_them_all(name):
    model = build_test_model(name)
    decay, no_decay = groups_by_id(model)
    pe = {id(p) for p in model.pe.parameters()}
    assert pe and pe <= set(decay)
    want_decay, want_no = rule_before(model)
    assert set(decay) == set(want_decay) | pe and set(no_decay) == set(want_no) - pe


def test_tape_decays_its_update_weights():
    """VITA-Group/TAPE trains with HF Trainer's AdamW, weight_decay 0.01 (script/train.sh), which decays every
    Linear weight: TAPE's four update matrices join the model's matrices, nothing else changes."""
    model = build_test_model("tape")
    decay, no_decay = groups_by_id(model)
    own = [id(p) for p in (model.pe.post_LHH, model.pe.up_LPH, model.pe.x_LPD, model.pe.down_LHP)]
    want_decay, want_no = rule_before(model)
    assert set(decay) == set(want_decay) | set(own) and set(no_decay) == set(want_no) - set(own)


@pytest.mark.parametrize("name", sorted(set(PES.names()) - {"fox", "cable", "repo", "tape", *DECAY_ALL}))
def test_every_other_pe_keeps_its_groups(name):
    model = build_test_model(name)
    assert groups_by_id(model) == rule_before(model)


@pytest.mark.parametrize("decoder_pe", ["learned", "fox"])
def test_the_encoder_decoders_decoder_pe_follows_the_same_rule(decoder_pe):
    cfg = load_config(overrides=["model.d_model=32", "model.n_heads=4", "model.n_layers=2", "model.d_ff=48",
                                 "model.vocab_size=32", "model.seq_len=24", "pe.name=sinusoidal",
                                 "model.arch.name=encoder_decoder", f"model.arch.decoder_pe.name={decoder_pe}",
                                 "model.arch.source_end=3"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.pe)
    decay, no_decay = groups_by_id(model)
    decayed = {id(p) for p in model.dec_pe.decay_params()}
    assert all((id(p) in decay) == (id(p) in decayed) for p in model.dec_pe.parameters())
    assert bool(decayed) == (decoder_pe == "fox")
