"""A pos-enc-bench decoder for `transformers` (remote code: torch, transformers and the modules shipped beside it).

Written next to an exported checkpoint (posbench.interop.hf_export) and loaded with
`AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`. Parameter names are posbench's own, so
the checkpoint loads unchanged. This file is the decoder; the PE is posbench's own class: the export writes
posbench's PE modules beside it (posbench.interop.hf_zoo: modules `pe_rope`, `pe_encoding`, ..., and `pe_zoo.py`,
which imports them all), and `config.pe`, the checkpoint's PE config, is loaded by posbench's strict loader
(`from_dict`: an unknown PE or option is refused with the nearest valid one) and built from posbench's registry.
The decoder reaches the PE only through posbench's hooks (pe/encoding.py), as posbench's model does.

Attention is the explicit-softmax reference in float32, as posbench's eager kernel: q and k from `rotate`, the
logits plus the PE's `score_mod` evaluated on broadcast index grids, masked, then its `logits_mod` (CoPE), as
posbench's `attention_bias` hands them over. Sliding windows: `layer_window(layer)` of the PE merged with
`config.attention_window` (the smaller wins): query slot i then sees slots i-W+1 .. i (the cache keeps every key;
the mask hides the older ones).
The KV cache (transformers' DynamicCache) holds rotated keys, as posbench's does; a PE's token features (FoX's log
forget gates) ride in it as one more key channel, so every cache operation keeps them with their keys.

Positions are token indices, as in training: 0..S-1, or in a left-padded batch (attention_mask 0 on pads)
each row's count of real tokens before it, which is what transformers' own models (Llama, Qwen3) and
`generate` derive from the mask. A cached key's position is therefore recomputed on every call instead of
being stored. In a left-padded batch each row's positions, rotations and token features are computed from its
real tokens alone (`rows_positions`, `rows_rotate`, `rows_features`), so a row computes what it does alone whatever
the PE reads (dynamic RoPE scaling's longest position, PaTH's convolution over the tokens before). A PE whose
positions are drawn per whole sequence (randomized, where posbench's `positions` refuses an offset) takes neither a
cache nor padding.

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

# transformers copies exactly the files a remote module imports as `from .file import name`, recursively: pe_zoo.py
# (written by the export) imports posbench's PE modules shipped beside this file
from .attention_options import GATES, TEMPERATURES, Gate, Temperature, UnitRMSNorm
from .configuration_posbench import PosbenchConfig
from .packing import DOCUMENTS_ATTR, Documents, check_packing, split_documents
from .pe_zoo import PES, LogitsMod, PEConfig, PEContext, PositionRangeError, attention_bias, from_dict

__all__ = ["Documents", "PosbenchForCausalLM", "build_pe", "check_packing"]

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


# A left-padded batch row by row, each on its real tokens only (keep_BT: True on them): what the row computes alone,
# whatever the PE reads besides a token's own position. Pads get zeros (they are masked out of attention).

def rows_positions(pe, keep_BS: torch.Tensor) -> torch.Tensor:
    """(B, S) float32: each row's positions, as posbench's `positions` gives a sequence of its real tokens."""
    pos_BS = torch.zeros(keep_BS.shape, dtype=torch.float32, device=keep_BS.device)
    for b, real in enumerate(keep_BS):
        pos_BS[b, real] = pe.positions(int(real.sum()), keep_BS.device, 0)
    return pos_BS


def rows_rotate(pe, q_BHTK, k_BHTK, pos_BT, keep_BT):
    """pe.rotate, per row when padded (its q and k may be wider than the head: qk_dim)."""
    if keep_BT is None:
        return pe.rotate(q_BHTK, k_BHTK, pos_BT)
    q_out = k_out = None
    for b, real in enumerate(keep_BT):
        q_b, k_b = pe.rotate(q_BHTK[b:b + 1, :, real], k_BHTK[b:b + 1, :, real], pos_BT[b:b + 1, real])
        if q_out is None:
            q_out, k_out = (t.new_zeros(*q_BHTK.shape[:3], t.shape[-1]) for t in (q_b, k_b))
        q_out[b:b + 1, :, real], k_out[b:b + 1, :, real] = q_b, k_b
    return q_out, k_out


def rows_features(pe, layer: int, x_BTD, keep_BT):
    """pe.token_features, per row when padded: (B, H, T), (B, H, F, T) or None."""
    if keep_BT is None:
        return pe.token_features(layer, x_BTD)
    out = None
    for b, real in enumerate(keep_BT):
        f = pe.token_features(layer, x_BTD[b:b + 1, real])
        if f is None:
            return None
        if out is None:
            out = f.new_zeros(x_BTD.shape[0], *f.shape[1:-1], x_BTD.shape[1])
        out[b:b + 1, ..., real] = f
    return out


def score_grids(B: int, H: int, T: int, S: int, device) -> tuple[torch.Tensor, ...]:
    """FlexAttention's (b, h, q_idx, kv_idx) as broadcast grids (B,1,1,1), (1,H,1,1), (1,1,T,1), (1,1,1,S)."""
    return (torch.arange(B, device=device)[:, None, None, None], torch.arange(H, device=device)[None, :, None, None],
            torch.arange(T, device=device)[None, None, :, None], torch.arange(S, device=device)[None, None, None, :])


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

    def forward(self, x_BTD, pos_BT, pos_BS, allowed_BTS, pe, layer: int, cache, keep_BT):
        """pos_BT, pos_BS: the positions of the new tokens and of every key, cached and new, (T,) and (S,) shared by
        the batch or per row; allowed_BTS: which keys each query sees; keep_BT: the new tokens that are real (None:
        all), for a left-padded batch."""
        B, T, D = x_BTD.shape
        qkv = self.qkv(x_BTD).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = rows_rotate(pe, self.q_norm(qkv[0]), self.k_norm(qkv[1]), pos_BT, keep_BT)
        v = qkv[2]
        # (B, H, T), or (B, H, F, T): F channels a token (PaTH)
        feats_BHT = rows_features(pe, layer, x_BTD, keep_BT)
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
        tempered = self.temperature.applies(pe.kind == "none")  # as posbench's model/attention.py asks
        f_BHT1 = self.temperature.factor_BHT1(pos_BT) if tempered else None
        if tempered:  # q times its position's factor: q . k scaled, the keys (cached) untouched
            q = (q.float() * f_BHT1).to(q.dtype)
        # over the width rotate returns (qk_dim: PoPE doubles it and scales q to match), as posbench's kernels do
        s_BHTS = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mod = attention_bias(pe, layer, pos_BT, pos_BS, feats_BHS, k)  # a score_mod, a LogitsMod or None
        if mod is not None and not isinstance(mod, LogitsMod):  # on broadcast index grids, as posbench's eager kernel
            biased = mod(s_BHTS, *score_grids(B, self.n_heads, T, S, s_BHTS.device))
            # a temperature scales the bias too
            s_BHTS = biased if not tempered else s_BHTS + (biased - s_BHTS) * f_BHT1
        s_BHTS = s_BHTS.masked_fill(~allowed_BTS[:, None], float("-inf"))
        if isinstance(mod, LogitsMod):  # the whole masked row (CoPE, PaTH, stick-breaking)
            s_BHTS = mod(q, s_BHTS)
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

    def forward(self, x, pos_BT, pos_BS, allowed_BTS, pe, layer, cache, keep_BT):
        x = x + self.attn(self.attn_norm(x), pos_BT, pos_BS, allowed_BTS, pe, layer, cache, keep_BT)
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

    def key_positions(self, keep_BS, docs, S: int, device) -> torch.Tensor:
        """The PE's positions of every slot, cached and new, as posbench's model asks them (design rule: position
        is data): (S,) shared by the batch; per row (B, S) in a left-padded batch (each row's real tokens as a
        sequence of their own) or with positions restarting at each document (`document_positions`)."""
        if docs is not None and self.packing["positions"] == "document":
            return self.pe.document_positions(docs.within_BS, docs.doc_k_BS)
        if keep_BS is not None:
            return rows_positions(self.pe, keep_BS)
        return self.pe.positions(S, device, 0)

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
            if self.whole_sequence:
                raise ValueError(f"PE `{self.config.pe['name']}` cannot take a padded batch: its positions are "
                                 "drawn for a whole sequence (randomized); pass unpadded sequences of equal length")
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
