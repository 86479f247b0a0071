"""What the export cannot write, and why: as a standard Qwen3 (`qwen3_reason`: the remote code is used instead) or at
all (`refuse_data_positions`, `refuse_unthreaded_hooks`: nothing is written, and the error points to posbench's own
evaluation). The export asks them before any file is written.
"""

from __future__ import annotations

from posbench.config import RunConfig
from posbench.errors import ConfigError
from posbench.interop.hf_qwen3 import rope_parameters

# model options that Qwen3 does not compute, each with its value when off: a model with one on exports as
# Qwen3NextForCausalLM where that carries it (interop/hf_qwen3_next.py), else with the remote code (which has them all)
QWEN3_LACKS = {"attention_gate": lambda m: m.attention_gate, "attention_sinks": lambda m: m.attention_sinks,
                "attention_temperature": lambda m: m.attention_temperature.name,
                "attention_chunk": lambda m: m.attention_chunk, "qk_norm_weight": lambda m: m.qk_norm_weight,
                "qk_norm_layers": lambda m: m.qk_norm_layers}
QWEN3_LACKS_OFF = {"attention_gate": "none", "attention_sinks": False, "attention_temperature": "none",
                    "attention_chunk": None, "qk_norm_weight": True, "qk_norm_layers": "all"}


def options_qwen3_lacks(m) -> list[str]:
    """`model.<option>=<value>` of each option on that Qwen3 does not compute."""
    return [f"model.{option}={value(m)}" for option, value in QWEN3_LACKS.items()
            if value(m) != QWEN3_LACKS_OFF[option]]


def qwen3_reason(run_cfg: RunConfig) -> str | None:
    """None when the checkpoint is a standard Qwen3ForCausalLM, else why not (the remote-code path is used)."""
    m = run_cfg.model
    if not (m.tie_embeddings and m.qk_norm):
        return "untied embeddings or no QK-norm (model.tie_embeddings, model.qk_norm) do not map onto Qwen3"
    if m.embed_scale != "none":
        return f"model.embed_scale={m.embed_scale} has no counterpart in Qwen3 (it never scales token embeddings)"
    if m.packing.active:
        return (f"model.packing (mask={m.packing.mask}, positions={m.packing.positions}) splits a row into documents "
                f"at token {m.packing.bos_id}; Qwen3 attends across them and counts positions from the row's start")
    if m.attention_window is not None:
        return f"model.attention_window={m.attention_window} is exported with posbench's remote code"
    lacking = options_qwen3_lacks(m)
    if lacking:
        return f"{', '.join(lacking)} has no counterpart in Qwen3"
    try:
        rope_parameters(run_cfg)
    except ConfigError as e:
        return str(e)
    return None


def refuse_data_positions(run_cfg: RunConfig) -> None:
    """A PE that reads the data's own position ids (`PositionalEncoding.reads_data_positions`: abacus, coupled) is
    not exported: transformers' generate() hands a model token indices only, so the exported model would never see
    the task's digit places it was trained with and would silently compute something else."""
    from posbench.pe import PES

    if PES.get(run_cfg.pe.name).reads_data_positions():
        raise ConfigError(f"PE `{run_cfg.pe.name}` takes its positions from the data (a task's per-token ids, e.g. "
                          "digit places), which a transformers model cannot be given through generate(); it is not "
                          "exported. Evaluate it with posbench (posbench eval / posbench study). Nothing was "
                          "exported")


# meaning hooks the exported decoder shell (interop/hf_remote/modeling_posbench.py) does not thread through its layers:
# positions read from a layer's input (RePo) and a state carried from layer to layer (TAPE); an exported model would
# silently compute without them, so such a PE is refused until the shell threads them
UNTHREADED_HOOKS = {"token_positions": "reads its positions from each layer's input",
                    "start_state": "carries a position state from layer to layer"}


def _pe_names(pe: dict) -> list[str]:
    """Every PE a PE config names: its own and its members' (a hybrid's pattern, a wrapper's inner), at any depth."""
    out = [pe["name"]] if isinstance(pe.get("name"), str) else []
    for value in pe.values():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, dict):
                out += _pe_names(v)
    return out


def refuse_unthreaded_hooks(run_cfg: RunConfig) -> None:
    """A PE (or a member of one) with a hook the decoder shell does not thread (UNTHREADED_HOOKS) is not exported."""
    from posbench.config_loader import to_dict
    from posbench.pe import PES
    from posbench.pe.encoding import overrides
    from posbench.pe.wrapper import WrapperPE

    for name in _pe_names(to_dict(run_cfg.pe)):
        if name not in PES.names() or issubclass(PES.get(name), WrapperPE):  # a wrapper hands the hooks to its inner
            continue
        for hook, what in UNTHREADED_HOOKS.items():
            if overrides(PES.get(name), hook):
                raise ConfigError(f"PE `{name}` {what} (`{hook}`), which the exported model's decoder shell does not "
                                  "thread through its layers; it is not exported. Evaluate it with posbench (posbench "
                                  "eval / posbench study). Nothing was exported")
