"""A pos-enc-bench decoder for `transformers` (remote code: torch, transformers and the modules shipped beside it).

Written next to an exported checkpoint (posbench.interop.hf_export) and loaded with
`AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`. Parameter names are posbench's own, so
the checkpoint loads unchanged. This file is the decoder; the PE is posbench's own class: the export writes
posbench's PE modules beside it (posbench.interop.hf_zoo: modules `pe_rope`, `pe_encoding`, ..., and `pe_zoo.py`,
which imports them all), and `config.pe`, the checkpoint's PE config, is loaded by posbench's strict loader
(`from_dict`: an unknown PE or option is refused with the nearest valid one) and built from posbench's registry.
The decoder reaches the PE only through posbench's hooks (pe/encoding.py), as posbench's model does. Its layers:
decoder_layers.py; the positions of a call: positions.py.

Which keys a query sees is made here, once per call: causal over cache slots, never a left pad, within the
query's document (packing mask=document), and per layer its sliding window, `layer_window(layer)` of the PE merged
with `config.attention_window` (the smaller wins): query slot i then sees slots i-W+1 .. i (the cache keeps every
key; the mask hides the older ones), and its attention chunk. A PE whose positions are drawn per whole sequence
(randomized, where posbench's `positions` refuses an offset) takes neither a cache nor padding.

transformers' calling convention changed within 5.x: 5.0 passes the cache as `past_key_values` with a
`cache_position` and always a mask; newer releases pass `cache`, drop an all-ones mask and read
the output's `cache`; both pass `position_ids` derived from the mask. forward accepts both names and ignores
`cache_position` (the cache length says the same), so one exported directory generates alike on every 5.x.
"""

from __future__ import annotations

import math
from dataclasses import fields

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

# transformers copies exactly the files a remote module imports as `from .file import name`, recursively: pe_zoo.py
# (written by the export) imports posbench's PE modules shipped beside this file
from .attention_options import GATES, TEMPERATURES
from .configuration_posbench import PosbenchConfig
from .decoder_layers import Block, RMSNorm
from .packing import check_packing
from .pe_zoo import PES, PEConfig, PEContext, PositionRangeError, from_dict
from .positions import TokenPositions

__all__ = ["PosbenchForCausalLM", "build_pe"]

# model.embed_scale -> the token embeddings' multiplier for a model width d (Vaswani et al. 2017, section 3.4)
EMBED_SCALES = {"none": lambda d: 1.0, "sqrt_d": lambda d: math.sqrt(d)}


def build_pe(pe: dict, ctx: PEContext):
    """posbench's PE for the config dict `pe` (as the checkpoint saved it), loaded strictly and built from PES."""
    return PES.build(from_dict(PEConfig, pe, "pe"), ctx)


def drawn_per_sequence(pe) -> bool:
    """Whether the PE's positions are drawn for a whole sequence (randomized at evaluation), as posbench's
    evaluation/generate.supports_cache asks it: its `positions` refuses an offset (a ValueError other than a range
    error). Asked in evaluation mode, where such a draw is seeded (no global random state is used)."""
    training = pe.training
    pe.eval()
    try:
        pe.positions(1, "cpu", offset=1)
    except PositionRangeError:
        return False  # a table too short even for two positions: generation is refused at its length anyway
    except ValueError:
        return True
    finally:
        pe.train(training)
    return False


# the output field that holds the cache: `cache` in newer transformers, `past_key_values` in 5.0
OUTPUT_CACHE_FIELD = "cache" if "cache" in {f.name for f in fields(CausalLMOutputWithPast)} else "past_key_values"


class PosbenchForCausalLM(TokenPositions, PreTrainedModel, GenerationMixin):
    config_class = PosbenchConfig
    base_model_prefix = "posbench"
    _no_split_modules = ["Block"]
    _tied_weights_keys = {"lm_head.weight": "tok_emb.weight"}  # tied only when config.tie_word_embeddings

    def __init__(self, config: PosbenchConfig):
        super().__init__(config)
        ctx = PEContext(config.hidden_size, config.num_attention_heads, config.num_hidden_layers,
                        config.max_position_embeddings, config.init_std)
        # built with real values where transformers builds the model on the meta device: a PE's non-persistent buffers
        # (RoPE frequencies, ALiBi slopes) are not in the checkpoint, and transformers empties them after loading for
        # _init_weights to compute again; the fork keeps the caller's random state (PE parameters draw an init)
        with torch.device("cpu"), torch.random.fork_rng(devices=[]):
            self.pe = build_pe(config.pe, ctx)
        self.pe_buffers = [(module, name, module._buffers[name].clone()) for module in self.pe.modules()
                           for name in module._non_persistent_buffers_set if module._buffers.get(name) is not None]
        self.whole_sequence = drawn_per_sequence(self.pe)
        self.packing = check_packing(getattr(config, "packing", None))
        if config.embed_scale not in EMBED_SCALES:
            raise ValueError(f"embed_scale={config.embed_scale!r} is not implemented by modeling_posbench.py")
        self.embed_scale = EMBED_SCALES[config.embed_scale](config.hidden_size)
        self.tok_emb = nn.Embedding(config.vocab_size, config.hidden_size)
        self.check_attention_options(config)
        positional_only = getattr(config, "qk_norm_layers", "all") == "positional"
        self.blocks = nn.ModuleList(
            Block(config, config.qk_norm and not (positional_only and self.pe.layer_pe(layer).kind == "none"))
            for layer in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.windows = [self.layer_window(config, layer) for layer in range(config.num_hidden_layers)]
        chunk = getattr(config, "attention_chunk", None)
        self.chunks = [chunk[layer % len(chunk)] if isinstance(chunk, (list, tuple)) else chunk
                       for layer in range(config.num_hidden_layers)]
        self.post_init()

    @staticmethod
    def check_attention_options(config: PosbenchConfig) -> None:
        gate = getattr(config, "attention_gate", "none")
        temperature = (getattr(config, "attention_temperature", None) or {"name": "none"})["name"]
        if gate not in GATES | {"none"} or temperature not in TEMPERATURES:
            raise ValueError(f"attention_gate={gate!r} or attention_temperature={temperature!r} is not implemented "
                             "by modeling_posbench.py")
        if getattr(config, "qk_norm_layers", "all") not in ("all", "positional"):
            raise ValueError(f"qk_norm_layers={config.qk_norm_layers!r} is not implemented by modeling_posbench.py")

    def layer_window(self, config: PosbenchConfig, layer: int) -> int | None:
        """A layer's sliding window: config.attention_window's and the PE's, the smaller when both set one."""
        w = config.attention_window
        if isinstance(w, (list, tuple)):
            w = w[layer % len(w)]
        windows = [x for x in (w, self.pe.layer_window(layer)) if x is not None]
        return min(windows) if windows else None

    def _init_weights(self, module):
        """Every weight comes from the posbench checkpoint (from_config keeps torch's defaults); a PE module's
        non-persistent buffers get the values the PE computed when it was built."""
        for owner, name, value in self.pe_buffers:
            if owner is module:
                module._buffers[name] = value.to(module._buffers[name].device)

    def get_input_embeddings(self):
        return self.tok_emb

    def set_input_embeddings(self, value):
        self.tok_emb = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, labels=None,
                use_cache=None, logits_to_keep=0, **kwargs):
        """transformers' causal-LM interface (as Llama's / Qwen3's forward): `cache` (also accepted under its
        5.0 name `past_key_values`), a 2D `attention_mask` over cached + new tokens (0 on left pads),
        `position_ids` (must be the token indices the mask implies: this model has no other positions)."""
        if "past_key_values" in kwargs:
            old = kwargs.pop("past_key_values")
            if cache is not None and old is not None:
                raise ValueError("pass the cache as `cache` or as `past_key_values`, not both")
            cache = old if cache is None else cache
        kwargs.pop("cache_position", None)  # 5.0 passes it; the cache length gives the same offset
        if kwargs.get("inputs_embeds") is not None or input_ids is None:
            # the PE is added to scaled token embeddings inside forward: embeddings from outside would skip it
            raise ValueError("modeling_posbench.py takes input_ids only (no inputs_embeds)")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if self.whole_sequence and (use_cache or cache is not None):
            # a cache would keep keys at positions drawn for a shorter sequence: refuse instead of decoding wrong
            raise ValueError("this model's positions are drawn for a whole sequence (randomized PE): generate with "
                             "use_cache=False")
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        B, T = input_ids.shape
        offset = cache.get_seq_length() if cache is not None else 0
        index_BS, keep_BS, docs = self.token_indices(attention_mask, position_ids, B, offset, T, input_ids.device,
                                                     input_ids, cache)
        S = offset + T
        pos_BS = self.key_positions(keep_BS, docs, S, input_ids.device)
        pos_BT = pos_BS[..., offset:]
        keep_BT = keep_BS[:, offset:] if keep_BS is not None else None
        # causal over cache slots; a pad key is never seen, but a pad query sees itself, so that a row of left
        # pads has one allowed key (no all -inf softmax, no NaN in the pad's values)
        slot_S = torch.arange(S, device=input_ids.device)
        query_T = slot_S[offset:]
        allowed_BTS = (slot_S[None, :] <= query_T[:, None])[None]
        if keep_BS is not None:
            allowed_BTS = allowed_BTS & (keep_BS[:, None, :] | (slot_S[None, :] == query_T[:, None])[None])
        if docs is not None and self.packing["mask"] == "document":
            allowed_BTS = allowed_BTS & (docs.doc_q_BT[:, :, None] == docs.doc_k_BS[:, None, :])
        x = self.tok_emb(input_ids)
        x = self.pe.embed(x * self.embed_scale if self.embed_scale != 1.0 else x, pos_BT)
        # per sliding window: the keys within the last W slots (left pads come first, so a slot distance between
        # real tokens is their token distance); made once per call and window
        by_window = {(None, None): allowed_BTS}
        # chunks (attention_chunk) by token index from the row's start, as posbench counts them in its window
        tok_BS = torch.arange(S, device=input_ids.device)[None] if keep_BS is None else \
            (keep_BS.long().cumsum(-1) - 1).clamp_min(0)
        for w, c in set(zip(self.windows, self.chunks, strict=True)) - {(None, None)}:
            allowed = allowed_BTS if w is None else allowed_BTS & (query_T[:, None] - slot_S[None, :] < w)[None]
            if c is not None:
                allowed = allowed & ((tok_BS[:, offset:, None] // c) == (tok_BS[:, None, :] // c))
            by_window[w, c] = allowed
        for layer, block in enumerate(self.blocks):
            x = block(x, pos_BT, pos_BS, by_window[self.windows[layer], self.chunks[layer]], self.pe.layer_pe(layer),
                      layer, cache, keep_BT)
        h = self.norm(x)
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            h = h[:, -logits_to_keep:]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{OUTPUT_CACHE_FIELD: cache})
