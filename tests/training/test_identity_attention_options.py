"""A run's identity (training/rundir.py) holds the attention options of docs/recipes.md only when set: a run
directory made before they existed keeps its identity (resumable), and a changed option is named."""

from posbench.config import load_config
from posbench.identity_fields import own_entries
from posbench.model.model_config import ModelConfig
from posbench.training.rundir import identity, identity_diffs, run_name

ATTENTION_OPTIONS = ("attention_gate", "attention_sinks", "attention_temperature", "attention_chunk",
                     "qk_norm_weight", "qk_norm_layers")


def test_defaults_leave_the_identity_as_before_the_options():
    ident = identity(load_config(model_size="nano"), "data")
    assert set(ATTENTION_OPTIONS) <= {e.name for e in own_entries(ModelConfig)}
    assert not set(ATTENTION_OPTIONS) & (set(ident) | set(ident["model"]))
    # what a run directory made before the options recorded: the same identity
    assert identity_diffs({**ident, "model": dict(ident["model"])}, ident) == ""


def test_a_set_option_is_part_of_the_identity_and_named_when_it_changes():
    plain = identity(load_config(model_size="nano"), "data")
    sunk = identity(load_config(model_size="nano", overrides=["model.attention_sinks=true",
                                                                "model.attention_temperature.name=log_n"]), "data")
    assert sunk["attention_sinks"] is True and sunk["attention_temperature"]["name"] == "log_n"
    assert identity_diffs(plain, sunk) == ("attention_sinks (checkpoint: false, this run: true), "
                                           "attention_temperature.name (checkpoint: none, this run: log_n), "
                                           # log_n's own option at its default: the other side lacks it
                                           "attention_temperature.at_least_one (checkpoint: null, this run: false)")


def test_run_names_say_which_options_are_set():
    assert run_name(load_config(model_size="nano"), 10**6) == "nano_rope_1M_s42"
    cfg = load_config(model_size="nano", pe_type="hybrid",  # llama4 tempers its NoPE layer (RoPE, NoPE)
                      overrides=["pe.pattern=[{name: rope}, {name: none}]", "model.attention_sinks=true",
                                 "model.attention_chunk=[8,null]",
                                 "model.attention_temperature.name=llama4", "model.qk_norm_weight=false"])
    assert run_name(cfg, 10**6) == "nano_hybrid_1M_s42_sinks_temp-llama4_chunk8-full_qknorm-unit"
