"""A pos-enc-bench decoder for `transformers` (remote code: imports torch and transformers only, never posbench).

Written next to an exported checkpoint (posbench.interop.hf_export) and loaded with
`AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`. Parameter names are posbench's own, so
the checkpoint loads unchanged. This file is the decoder; the PEs are in one file per family (pe_rotary.py,
pe_bias.py, pe_absolute.py, pe_data_dependent.py, pe_wrappers.py, with pe_rope_scaling.py), each class registered
by the posbench name it implements (pe_contract.py: the contract, with posbench's hook names and shapes, and the
PE_CLASSES registry) and found by the name in `config.pe`. Each class lists the config fields it reads
(`options`), and a config with any other field is refused, so a PE option this code does not implement can never
load as a silently different model.

Attention is the explicit-softmax reference in float32, as posbench's eager kernel: q and k from `rotate`, the
logits plus the PE's `score_mod` evaluated on broadcast index grids, masked, then its `logits_mod` (CoPE). Sliding
windows: `layer_window(layer)` of the PE merged with `config.attention_window` (the smaller wins): query slot i then
sees slots i-W+1 .. i (the cache keeps every key; the mask hides the older ones).
The KV cache (transformers' DynamicCache) holds rotated keys, as posbench's does; a PE's token features (FoX's log
forget gates) ride in it as one more key channel, so every cache operation keeps them with their keys.

Positions are token indices, as in training: 0..S-1, or in a left-padded batch (attention_mask 0 on pads)
each row's count of real tokens before it, which is what transformers' own models (Llama, Qwen3) and
`generate` derive from the mask. A cached key's position is therefore recomputed from the mask on every call
instead of being stored. Randomized positions are drawn per whole sequence (no cache, no padding), and
dynamic RoPE scaling sets its frequencies from the longest position (no padding).

Packed documents (config.packing, posbench's model.packing): a row is split into documents at `bos_id` (a pad is
never a boundary; tokens before the first one are a document of their own); mask=document stops attention at a
document's start, positions=document restarts token indices there. The documents of cached keys ride on the
DynamicCache (DOCUMENTS_ATTR), as posbench's KVCache.documents, so cached decoding continues the current one.

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

# every PE family is imported here for its register() calls (the names marked F401): transformers copies exactly
# the files a remote module imports as `from .file import name`, recursively
from .attention_options import GATES, TEMPERATURES, Gate, Temperature, UnitRMSNorm
from .configuration_posbench import PosbenchConfig
from .packing import DOCUMENTS_ATTR, Documents, check_packing, split_documents
from .pe_absolute import Table  # noqa: F401
from .pe_bias import BiasPE  # noqa: F401
from .pe_contract import PE_CLASSES, PEContext, PositionalEncoding, build_pe, check_pe_config, score_grids
from .pe_data_dependent import CoPE  # noqa: F401
from .pe_path import PaTH  # noqa: F401
from .pe_rotary import Rotary  # noqa: F401
from .pe_wrappers import Hybrid  # noqa: F401

__all__ = ["PE_CLASSES", "Documents", "PEContext", "PosbenchForCausalLM", "build_pe", "check_packing",
           "check_pe_config"]

# model.embed_scale -> the token embeddings' multiplier for a model width d (Vaswani et al. 2017, section 3.4)
EMBED_SCALES = {"none": lambda d: 1.0, "sqrt_d": lambda d: math.sqrt(d)}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: PosbenchConfig, qk_norm: bool):
        super().__init__()
        D = cfg.hidden_size
        self.n_heads, self.head_dim = cfg.num_attention_heads, D // cfg.num_attention_heads
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        norm = RMSNorm if getattr(cfg, "qk_norm_weight", True) else UnitRMSNorm
        self.q_norm = norm(self.head_dim, cfg.rms_norm_eps) if qk_norm else nn.Identity()
        self.k_norm = norm(self.head_dim, cfg.rms_norm_eps) if qk_norm else nn.Identity()
        gate = getattr(cfg, "attention_gate", "none")
        if gate != "none":
            self.gate = Gate(D, self.n_heads, gate)
        if getattr(cfg, "attention_sinks", False):
            self.sinks = nn.Parameter(torch.zeros(self.n_heads))
        self.temperature = Temperature(getattr(cfg, "attention_temperature", None) or {"name": "none"}, self.n_heads,
                                       cfg.max_position_embeddings)

    def forward(self, x_BTD, pos_BT, pos_BS, allowed_BTS, pe: PositionalEncoding, layer: int, cache):
        """pos_BS: the positions of every key, cached and new; allowed_BTS: which keys each query sees."""
        B, T, D = x_BTD.shape
        qkv = self.qkv(x_BTD).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = pe.rotate(self.q_norm(qkv[0]), self.k_norm(qkv[1]), pos_BT)
        v = qkv[2]
        feats_BHT = pe.token_features(layer, x_BTD)  # (B, H, T), or (B, H, F, T): F channels a token (PaTH)
        if feats_BHT is not None:  # cached beside the keys, as one more channel each
            per_token = feats_BHT[..., None] if feats_BHT.dim() == 3 else feats_BHT.transpose(-1, -2)
            k = torch.cat((k, per_token.to(k.dtype)), dim=-1)
        if cache is not None:
            k, v = cache.update(k, v, layer)
        feats_BHS = None
        if feats_BHT is not None:
            n_feats = 1 if feats_BHT.dim() == 3 else feats_BHT.shape[2]
            k, feats_BSF = k[..., :-n_feats], k[..., -n_feats:]
            feats_BHS = feats_BSF[..., 0] if feats_BHT.dim() == 3 else feats_BSF.transpose(-1, -2)
        S = pos_BS.shape[-1]
        if k.shape[2] != S:
            # a cache that returns preallocated slots (StaticCache) would have the padding slots attended
            raise ValueError(f"the cache returned {k.shape[2]} keys for {S} tokens; modeling_posbench.py supports "
                             "transformers' DynamicCache only (leave cache_implementation unset)")
        tempered = self.temperature.applies(pe.cfg["name"] == "none")
        f_BHT1 = self.temperature.factor_BHT1(pos_BT) if tempered else None
        if tempered:  # q times its position's factor: q . k scaled, the keys (cached) untouched
            q = (q.float() * f_BHT1).to(q.dtype)
        s_BHTS = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.head_dim)
        mod = pe.score_mod(layer, pos_BT, pos_BS, feats_BHS)
        if mod is not None:  # evaluated on broadcast index grids, as posbench's eager kernel does
            biased = mod(s_BHTS, *score_grids(B, self.n_heads, T, S, s_BHTS.device))
            # a temperature scales the bias too
            s_BHTS = biased if not tempered else s_BHTS + (biased - s_BHTS) * f_BHT1
        s_BHTS = pe.logits_mod(layer, q, s_BHTS.masked_fill(~allowed_BTS[:, None], float("-inf")), k, feats_BHS)
        if hasattr(self, "sinks"):  # a virtual key of logit sinks[h] and value 0 (posbench's attention_sinks.py)
            sink_BHT1 = self.sinks.float().view(1, -1, 1, 1).expand(B, self.n_heads, T, 1)
            p_BHTS = torch.softmax(torch.cat((s_BHTS, sink_BHT1), dim=-1), dim=-1)[..., :-1]
        else:
            p_BHTS = torch.softmax(s_BHTS, dim=-1)
        out_BTHK = (p_BHTS @ v.float()).to(x_BTD.dtype).transpose(1, 2)
        if hasattr(self, "gate"):
            out_BTHK = self.gate(x_BTD, out_BTHK)
        return self.proj(out_BTHK.reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, cfg: PosbenchConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: PosbenchConfig, qk_norm: bool):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg, qk_norm)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x, pos_BT, pos_BS, allowed_BTS, pe, layer, cache):
        x = x + self.attn(self.attn_norm(x), pos_BT, pos_BS, allowed_BTS, pe, layer, cache)
        return x + self.mlp(self.mlp_norm(x))


# the output field that holds the cache: `cache` in newer transformers, `past_key_values` in 5.0
OUTPUT_CACHE_FIELD = "cache" if "cache" in {f.name for f in fields(CausalLMOutputWithPast)} else "past_key_values"


class PosbenchForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = PosbenchConfig
    base_model_prefix = "posbench"
    _no_split_modules = ["Block"]
    _tied_weights_keys = {"lm_head.weight": "tok_emb.weight"}  # tied only when config.tie_word_embeddings

    def __init__(self, config: PosbenchConfig):
        super().__init__(config)
        check_pe_config(config.pe)
        ctx = PEContext(config.hidden_size, config.num_attention_heads, config.num_hidden_layers,
                    config.max_position_embeddings, config.init_std)
        self.pe = build_pe(config.pe, ctx)
        self.packing = check_packing(getattr(config, "packing", None), self.pe)
        if config.embed_scale not in EMBED_SCALES:
            raise ValueError(f"embed_scale={config.embed_scale!r} is not implemented by modeling_posbench.py")
        self.embed_scale = EMBED_SCALES[config.embed_scale](config.hidden_size)
        self.tok_emb = nn.Embedding(config.vocab_size, config.hidden_size)
        self.check_attention_options(config)
        positional_only = getattr(config, "qk_norm_layers", "all") == "positional"
        self.blocks = nn.ModuleList(
            Block(config, config.qk_norm and not (positional_only and self.pe.layer_pe(layer).cfg["name"] == "none"))
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
        """Nothing: every weight comes from the posbench checkpoint (from_config keeps torch's defaults)."""

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
        if self.pe.whole_sequence and (use_cache or cache is not None):
            # a cache would keep keys at positions drawn for a shorter sequence: refuse instead of decoding wrong
            raise ValueError("this model's positions are drawn for a whole sequence (randomized PE): generate with "
                             "use_cache=False")
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        B, T = input_ids.shape
        offset = cache.get_seq_length() if cache is not None else 0
        index_BS, keep_BS, docs = self.token_indices(attention_mask, position_ids, B, offset, T, input_ids.device,
                                                     input_ids, cache)
        pos_BS = self.pe.positions(index_BS)
        pos_BT = pos_BS[:, offset:]
        S = offset + T
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
                      layer, cache)
        h = self.norm(x)
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            h = h[:, -logits_to_keep:]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{OUTPUT_CACHE_FIELD: cache})

    def token_indices(self, attention_mask, position_ids, B: int, offset: int, T: int, device, input_ids=None,
                      cache=None):
        """(index_BS, keep_BS, docs): each slot's token index (what the PE sees as its position; with document
        positions its index within its document) and which slots are real tokens (None: all of them). Padded rows
        count only their real tokens, as transformers does. docs: the documents (packing) or None."""
        S, keep_BS = offset + T, None
        if attention_mask is not None:
            if attention_mask.ndim != 2 or tuple(attention_mask.shape) != (B, S):
                raise ValueError(f"attention_mask must be 2D (batch, cached + new tokens) = ({B}, {S}), got shape "
                                 f"{tuple(attention_mask.shape)}")
            if not bool(attention_mask.bool().all()):
                keep_BS = attention_mask.bool()
        if keep_BS is None:
            index_BS = torch.arange(S, device=device)[None]
        else:
            if not self.pe.pads_ok:
                raise ValueError(f"PE `{self.config.pe['name']}` cannot take a padded batch: its positions "
                                 "(randomized) or frequencies (dynamic RoPE scaling) are set by the whole sequence, "
                                 "not per row, or it reads the tokens before (PaTH's convolution); pass unpadded "
                                 "sequences of equal length")
            index_BS = (keep_BS.long().cumsum(-1) - 1).clamp_min(0)
        docs = self.documents(input_ids, index_BS, keep_BS, offset, cache) if self.packing else None
        accepted = [index_BS[:, offset:]]  # what generate passes
        if docs is not None and self.packing["positions"] == "document":
            index_BS = docs.within_BS
            accepted.append(index_BS[:, offset:])  # the model's own positions, given back
        if position_ids is not None:
            real_BT = keep_BS[:, offset:] if keep_BS is not None else torch.ones_like(accepted[0], dtype=torch.bool)
            if position_ids.ndim != 2 or position_ids.shape[-1] != T or \
                    all(bool(((position_ids.to(device) != want_BT) & real_BT).any()) for want_BT in accepted):
                # cached keys' positions are not stored but recomputed from the mask: other positions cannot be
                # honoured, and the model was trained on token indices only
                raise ValueError("position_ids must be the token indices implied by attention_mask (what generate "
                                 "passes)" + (", or each token's index within its document (packing.positions="
                                              "document; the model restarts positions at each bos_id itself)"
                                              if len(accepted) > 1 else "")
                                 + "; modeling_posbench.py has no other positions")
        return index_BS, keep_BS, docs

    def documents(self, input_ids, index_BS, keep_BS, offset: int, cache) -> Documents:
        """This call's documents (split_documents), continuing those the cache carries, which then carries
        these: cached keys keep the document and position they were written with."""
        before = None
        if offset:
            before = getattr(cache, DOCUMENTS_ATTR, None)
            if before is None or before.doc_k_BS.shape != (input_ids.shape[0], offset):
                raise ValueError("this cache's keys carry no document boundaries of this model's (a cache filled "
                                 "elsewhere, cropped or reordered, as beam search and assisted decoding do); "
                                 "decode greedily or by sampling with the cache this model returns, or without one")
        keep_BT = keep_BS[:, offset:] if keep_BS is not None else None
        docs = split_documents(input_ids, index_BS[:, offset:], keep_BT, self.packing["bos_id"], before)
        if cache is not None:
            setattr(cache, DOCUMENTS_ATTR, docs)
        return docs
