"""A pos-enc-bench decoder for `transformers` (remote code: imports torch and transformers only, never posbench).

Written next to an exported checkpoint (posbench.interop.hf_export) and loaded with
`AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`. Parameter names are posbench's own, so
the checkpoint loads unchanged. Every positional encoding posbench registers has a small class here, found
through the PE_CLASSES registry by the name in `config.pe`; each class lists the config fields it reads
(`options`), and a config with any other field is refused, so a PE option this file does not implement can
never load as a silently different model.

Shape legend: B batch, H heads, T new tokens, S cached + new tokens, K head dim, D model dim, F K/2.
A leading B of a position tensor may be 1 (every row at the same positions: an unpadded batch).
The PE contract, as in posbench but with a row per sequence: positions(index_BS) -> float32 positions of
token indices; embed(x, pos_BT) adds absolute tables; rotate(q, k, pos_BT) for the RoPE family;
bias(layer, pos_q_BT, pos_k_BS) -> (B, H, T, S) logit bias or None; layer_pe(layer) the PE a layer uses
(per-layer hybrids); layer_window(layer) the sliding window a PE gives a layer (RNoPE-SWA), merged with
`config.attention_window` (the smaller wins): query slot i then sees slots i-W+1 .. i (the cache keeps every
key; the mask hides the older ones). Data-dependent PEs add: token_features(layer, x_BTD) -> (B, H, T) float32 or
None (FoX's log forget gates), feature_bias(layer, pos_q_BT, pos_k_BS, feats_BHS) (by default `bias`), and
logits_mod(layer, q, s) on the masked logits (CoPE). Attention is the explicit-softmax reference in float32. The KV
cache (transformers' DynamicCache) holds rotated keys, as posbench's does; a PE's token features ride in it as one
more key channel, so every cache operation keeps them with their keys.

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
from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_posbench import PosbenchConfig

PE_CLASSES: dict[str, type[PE]] = {}
SCALINGS: dict[str, tuple[frozenset, object]] = {}  # name -> (options, transform(inv_F, pos_BT, cfg, original))


def register(*names):
    def wrap(cls):
        for name in names:
            PE_CLASSES[name] = cls
        return cls
    return wrap


@dataclass(frozen=True)
class Dims:
    d_model: int
    n_heads: int
    n_layers: int
    seq_len: int  # training length (a randomized PE's inner PE gets its whole range here)
    init_std: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def check_pe_config(cfg: dict, where: str = "pe") -> None:
    """ValueError unless every PE (and RoPE scaling) named in cfg, and every option it sets, is implemented."""
    name = cfg.get("name")
    if name not in PE_CLASSES:
        raise ValueError(f"{where}: positional encoding `{name}` is not implemented by modeling_posbench.py")
    cls = PE_CLASSES[name]
    unknown = set(cfg) - {"name"} - cls.options
    if unknown:
        raise ValueError(f"{where}: option(s) {sorted(unknown)} of `{name}` are not implemented by "
                         "modeling_posbench.py; loading would compute a different model")
    if "scaling" in cfg:
        scaling = cfg["scaling"]
        if scaling.get("name") not in SCALINGS:
            raise ValueError(f"{where}.scaling: RoPE scaling `{scaling.get('name')}` is not implemented")
        unknown = set(scaling) - {"name"} - SCALINGS[scaling["name"]][0]
        if unknown:
            raise ValueError(f"{where}.scaling: option(s) {sorted(unknown)} are not implemented")
    for i, member in enumerate(cfg.get("pattern") or []):
        check_pe_config(member, f"{where}.pattern[{i}]")
    for key in ("inner", "rope"):  # nested PE configs (randomized's inner, RNoPE-SWA's rope)
        if key in cfg:
            check_pe_config(cfg[key], f"{where}.{key}")


# model.embed_scale -> the token embeddings' multiplier for a model width d (Vaswani et al. 2017, section 3.4)
EMBED_SCALES = {"none": lambda d: 1.0, "sqrt_d": lambda d: math.sqrt(d)}


def build_pe(cfg: dict, dims: Dims) -> PE:
    return PE_CLASSES[cfg["name"]](cfg, dims)


class PE(nn.Module):
    options: frozenset = frozenset()  # config fields besides `name` this class implements
    whole_sequence = False  # positions depend on the whole sequence: no KV cache

    @property
    def pads_ok(self) -> bool:
        """Whether rows may sit at different positions (a left-padded batch): every PE whose output at a
        position depends only on that row's positions."""
        return True

    def __init__(self, cfg: dict, dims: Dims):
        super().__init__()
        self.cfg, self.dims = cfg, dims

    @property
    def max_positions(self) -> int | None:
        return None

    def check(self, n_positions: int) -> None:
        limit = self.max_positions
        if limit is not None and n_positions > limit:
            raise ValueError(f"PE `{self.cfg['name']}` is defined for positions 0..{limit - 1}, but {n_positions} "
                             f"positions were requested; give at most {limit} tokens")

    def positions(self, index_BS: torch.Tensor) -> torch.Tensor:
        """Token indices (long) -> this PE's float32 positions."""
        self.check(int(index_BS.max().item()) + 1 if index_BS.numel() else 0)
        return index_BS.float()

    def embed(self, x_BTD, pos_BT):
        return x_BTD

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        return q_BHTK, k_BHTK

    def bias(self, layer: int, pos_q_BT, pos_k_BS):
        return None

    def token_features(self, layer: int, x_BTD):
        return None

    def feature_bias(self, layer: int, pos_q_BT, pos_k_BS, feats_BHS):
        return self.bias(layer, pos_q_BT, pos_k_BS)

    def logits_mod(self, layer: int, q_BHTK, s_BHTS):
        return s_BHTS

    def layer_pe(self, layer: int) -> PE:
        return self

    def layer_window(self, layer: int) -> int | None:
        return None


register("none")(PE)


# -- RoPE family -------------------------------------------------------------------------------------------
def scaling(name: str, *options: str):
    def wrap(fn):
        SCALINGS[name] = (frozenset(("factor", "original_max_positions", *options)), fn)
        return fn
    return wrap


def ntk_inv_freq(inv_F, factor):
    F_ = inv_F.shape[0]
    i = torch.arange(F_, device=inv_F.device, dtype=torch.float32)
    return inv_F * factor ** (-2 * i / (2 * F_ - 2))


def yarn_mscale(factor):
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


@scaling("none")
def _none(inv_F, pos_BT, cfg, original):
    return inv_F, 1.0


@scaling("pi")  # Chen et al. 2023: every frequency divided by the factor
def _pi(inv_F, pos_BT, cfg, original):
    return inv_F / cfg["factor"], 1.0


@scaling("ntk")  # base b -> b * s^(d/(d-2)), as a per-frequency factor
def _ntk(inv_F, pos_BT, cfg, original):
    return ntk_inv_freq(inv_F, cfg["factor"]), 1.0


@scaling("dynamic")  # NTK with the factor grown to the current length, only past the original length
def _dynamic(inv_F, pos_BT, cfg, original):
    length = int(pos_BT.max().item()) + 1 if pos_BT.numel() else 0
    if length <= original:
        return inv_F, 1.0
    s = cfg["factor"] * length / original - (cfg["factor"] - 1)
    return ntk_inv_freq(inv_F, s), 1.0


@scaling("yarn", "beta_fast", "beta_slow", "truncate")
def _yarn(inv_F, pos_BT, cfg, original):
    """transformers' YaRN: a ramp linear in the frequency index between the indices where a frequency turns
    beta_fast and beta_slow times over the original length (found by a log-linear fit, exact for RoPE)."""
    F_ = inv_F.shape[0]
    inv = inv_F.detach().double().cpu()
    used = torch.nonzero(inv > 0).flatten().double()
    y = torch.log(original * inv[used.long()] / (2 * math.pi))
    slope = ((used - used.mean()) * (y - y.mean())).sum() / ((used - used.mean()) ** 2).sum()
    intercept = y.mean() - slope * used.mean()
    index_at = lambda n: float((math.log(n) - intercept) / slope)
    low, high = index_at(cfg["beta_fast"]), index_at(cfg["beta_slow"])
    if cfg.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, 2 * F_ - 1)
    if low == high:
        high += 0.001
    ramp_F = ((torch.arange(F_, dtype=torch.float32, device=inv_F.device) - low) / (high - low)).clamp(0.0, 1.0)
    return inv_F / cfg["factor"] * ramp_F + inv_F * (1 - ramp_F), yarn_mscale(cfg["factor"])


@scaling("yarn_paper", "alpha", "beta")
def _yarn_paper(inv_F, pos_BT, cfg, original):
    """Peng et al. 2023 eqs. 17-22 as written: the ramp is linear in L_train / wavelength."""
    r_F = original / (2 * math.pi / inv_F.clamp_min(1e-30))
    gamma_F = ((r_F - cfg["alpha"]) / (cfg["beta"] - cfg["alpha"])).clamp(0.0, 1.0)
    return (1 - gamma_F) * inv_F / cfg["factor"] + gamma_F * inv_F, yarn_mscale(cfg["factor"])


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x_BHTK, cos_BTK, sin_BTK):
    xf = x_BHTK.float()
    return (xf * cos_BTK[:, None] + rotate_half(xf) * sin_BTK[:, None]).to(x_BHTK.dtype)


@scaling("llama3", "low_freq_factor", "high_freq_factor")
def _llama3(inv_F, pos_BT, cfg, original):
    """Llama 3.1: wavelengths above original/low divided by the factor, below original/high kept, a blend in
    between (transformers' _compute_llama3_parameters)."""
    low, high, factor = cfg["low_freq_factor"], cfg["high_freq_factor"], cfg["factor"]
    wavelen_F = 2 * math.pi / inv_F
    scaled_F = torch.where(wavelen_F > original / low, inv_F / factor, inv_F)
    g_F = (original / wavelen_F - low) / (high - low)
    medium_F = (wavelen_F >= original / high) & (wavelen_F <= original / low)
    return torch.where(medium_F, (1 - g_F) * scaled_F / factor + g_F * scaled_F, scaled_F), 1.0


@scaling("longrope", "short_factor", "long_factor", "attention_factor")
def _longrope(inv_F, pos_BT, cfg, original):
    """LongRoPE: per-frequency factors, the long ones once the longest position passes the original length."""
    length = int(pos_BT.max().item()) + 1 if pos_BT.numel() else 0
    factors = cfg["long_factor"] if length > original else cfg["short_factor"]
    mscale = cfg.get("attention_factor")
    if mscale is None:
        f = cfg["factor"]
        mscale = math.sqrt(1 + math.log(f) / math.log(original)) if f > 1 else 1.0
    return inv_F / torch.tensor(factors, dtype=inv_F.dtype, device=inv_F.device), mscale


@register("rope")
class Rotary(PE):
    """RoFormer rotation, "rotate half" layout over the first R = int(K * rotary_fraction) channels: channel j
    pairs with j + R/2 at frequency inv_F[j mod R/2]; channels R.. pass unrotated (partial rotary)."""

    options = frozenset(("theta", "scaling", "rotary_fraction"))

    @property
    def pads_ok(self):
        # dynamic NTK and LongRoPE set every frequency from the longest position in the call: rows of one padded
        # batch would each need their own
        return (self.cfg.get("scaling") or {}).get("name", "none") not in ("dynamic", "longrope")

    @property
    def rotary_dim(self) -> int:
        return int(self.dims.head_dim * self.cfg.get("rotary_fraction", 1.0))

    def inv_freq(self):
        R = self.rotary_dim
        return self.cfg["theta"] ** (-torch.arange(0, R, 2, dtype=torch.float32) / R)

    def cos_sin(self, pos_BT):
        s = self.cfg.get("scaling") or {"name": "none"}
        original = s.get("original_max_positions") or self.dims.seq_len
        inv_F, mscale = SCALINGS[s["name"]][1](self.inv_freq().float().to(pos_BT.device), pos_BT, s, original)
        angle_BTF = pos_BT.float()[..., None] * inv_F
        angle_BTK = torch.cat((angle_BTF, angle_BTF), dim=-1)
        return angle_BTK.cos() * mscale, angle_BTK.sin() * mscale

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        R = self.rotary_dim
        q_rot, k_rot = self.rotate_rotary(q_BHTK[..., :R], k_BHTK[..., :R], pos_BT)
        return torch.cat((q_rot, q_BHTK[..., R:]), dim=-1), torch.cat((k_rot, k_BHTK[..., R:]), dim=-1)

    def rotate_rotary(self, q_BHTR, k_BHTR, pos_BT):
        cos_BTR, sin_BTR = self.cos_sin(pos_BT)
        return apply_rotary(q_BHTR, cos_BTR, sin_BTR), apply_rotary(k_BHTR, cos_BTR, sin_BTR)


@register("drope")
class DroppableRotary(Rotary):
    """DroPE: RoPE until training dropped it (`dropped`: true in the checkpoint's config), then no PE at all."""

    options = Rotary.options | {"dropped", "drop_at"}  # drop_at: when training dropped it; no effect here

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        if self.cfg.get("dropped"):
            return q_BHTK, k_BHTK
        return super().rotate(q_BHTK, k_BHTK, pos_BT)


@register("lrope")
class LearnedRotary(Rotary):
    """RoPE whose per-frequency rates are parameters (trained from RoPE's)."""

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.inv_freq_param = nn.Parameter(torch.zeros(self.rotary_dim // 2))

    def inv_freq(self):
        return self.inv_freq_param


@register("prope")
class PartialRotary(Rotary):
    """p-RoPE: the lowest (1 - fraction) of the frequencies are zero, i.e. not rotated."""

    options = Rotary.options | {"fraction"}

    def inv_freq(self):
        inv_F = super().inv_freq()
        inv_F[round(self.cfg["fraction"] * inv_F.shape[0]):] = 0.0
        return inv_F


@register("modded_rope")
class ModdedRotary(Rotary):
    """modded-nanogpt's half-truncated RoPE: R/4 frequencies (1/theta)^linspace(0, 1, R/4), then R/4 zeros."""

    def inv_freq(self):
        quarter = self.rotary_dim // 4
        inv_F = (1.0 / self.cfg["theta"]) ** torch.linspace(0, 1, steps=quarter, dtype=torch.float32)
        return torch.cat((inv_F, inv_F.new_zeros(quarter)))


@register("hope")
class HighFrequencyRotary(Rotary):
    """HoPE: frequencies without a full period within the training length are zero (position-free)."""

    def inv_freq(self):
        inv_F = super().inv_freq()
        return torch.where(inv_F * self.dims.seq_len >= 2 * math.pi, inv_F, torch.zeros_like(inv_F))


@register("fope")
class FourierRotary(Rotary):
    """FoPE: the D frequencies with a full period within the training length are mixed per head into d = min(D,
    K/4) slots by fixed (H, D, d) matrices (from the checkpoint), cos and sin each with its own; the other slots
    are zero frequency (cos 1, sin 0). `fourier_shared`: one pair for every layer, else one per layer (L, H, D, d),
    each layer's through `layer_pe`."""

    # the gain and the column normalisation only drew the matrices, which come with the weights
    options = Rotary.options | {"fourier_gain", "fourier_norm", "fourier_shared"}

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        R, theta = self.rotary_dim, cfg["theta"]  # Python floats: transformers builds the model on the meta device
        self.n_in = sum(theta ** (-2 * i / R) * dims.seq_len >= 2 * math.pi for i in range(R // 2))
        self.n_out = min(self.n_in, dims.head_dim // 4) if self.n_in else 0
        sets = () if cfg["fourier_shared"] else (dims.n_layers,)
        self.register_buffer("cos_coef", torch.zeros(*sets, dims.n_heads, self.n_in, self.n_out))
        self.register_buffer("sin_coef", torch.zeros(*sets, dims.n_heads, self.n_in, self.n_out))
        # plain list, not submodules: the buffers load once, under `pe`
        self.layer_views = [] if cfg["fourier_shared"] else [FourierLayer(self, i) for i in range(dims.n_layers)]

    def layer_pe(self, layer):
        return self.layer_views[layer] if self.layer_views else self

    def cos_sin(self, pos_BT, layer=0):
        cos_c, sin_c = (self.cos_coef, self.sin_coef) if self.cos_coef.dim() == 3 else \
            (self.cos_coef[layer], self.sin_coef[layer])
        s = self.cfg.get("scaling") or {"name": "none"}
        original = s.get("original_max_positions") or self.dims.seq_len
        inv_F, mscale = SCALINGS[s["name"]][1](self.inv_freq().float().to(pos_BT.device), pos_BT, s, original)
        angle_BTD = pos_BT.float()[..., None] * inv_F[: self.n_in]
        cos_BHTd = torch.einsum("btD,hDd->bhtd", angle_BTD.cos(), cos_c.float())
        sin_BHTd = torch.einsum("btD,hDd->bhtd", angle_BTD.sin(), sin_c.float())
        pad = self.rotary_dim // 2 - self.n_out
        cos_BHTF = F.pad(cos_BHTd, (0, pad), value=1.0)
        sin_BHTF = F.pad(sin_BHTd, (0, pad), value=0.0)
        return torch.cat((cos_BHTF, cos_BHTF), dim=-1) * mscale, torch.cat((sin_BHTF, sin_BHTF), dim=-1) * mscale

    def rotate(self, q_BHTK, k_BHTK, pos_BT, layer=0):
        R = self.rotary_dim
        cos_BHTR, sin_BHTR = self.cos_sin(pos_BT, layer)  # per head already: no head axis to add

        def rot(x):
            xf = x.float()
            return (xf * cos_BHTR + rotate_half(xf) * sin_BHTR).to(x.dtype)
        return (torch.cat((rot(q_BHTK[..., :R]), q_BHTK[..., R:]), dim=-1),
                torch.cat((rot(k_BHTK[..., :R]), k_BHTK[..., R:]), dim=-1))


class FourierLayer(PE):
    """Layer `layer` of a per-layer FoPE: the owner's rotation with that layer's matrices (it holds no tensors)."""

    def __init__(self, owner, layer):
        super().__init__(owner.cfg, owner.dims)
        object.__setattr__(self, "owner", owner)  # a plain reference, not a submodule
        self.layer = layer

    @property
    def pads_ok(self):
        return self.owner.pads_ok

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        return self.owner.rotate(q_BHTK, k_BHTK, pos_BT, self.layer)


@register("xpos")
class XPos(Rotary):
    """RoPE with q scaled by zeta^(n/B) and k by zeta^(-m/B): q.k decays by zeta^((n-m)/B) per frequency."""

    options = Rotary.options | {"gamma", "scale_base"}

    def rotate_rotary(self, q_BHTK, k_BHTK, pos_BT):
        cos_BTK, sin_BTK = self.cos_sin(pos_BT)
        K = self.rotary_dim
        zeta_F = (torch.arange(0, K, 2, device=pos_BT.device, dtype=torch.float32) / K + self.cfg["gamma"]) \
            / (1 + self.cfg["gamma"])
        scale_BTF = zeta_F ** (pos_BT.float()[..., None] / self.cfg["scale_base"])
        scale_BTK = torch.cat((scale_BTF, scale_BTF), dim=-1)
        return (apply_rotary(q_BHTK, cos_BTK * scale_BTK, sin_BTK * scale_BTK),
                apply_rotary(k_BHTK, cos_BTK / scale_BTK, sin_BTK / scale_BTK))


@register("pope")
class PolarRotary(PE):
    """PoPE: channel c of q/k becomes the complex number softplus(x_c) e^(i pos theta_c), theta_c = theta^(-c/K),
    keys with a learned phase bias clamped to [-2 pi, 0], written as 2K real channels [mu cos, mu sin]: the
    attention's q.k / sqrt(K) is then sum_c mu_q mu_k cos((s - t) theta_c + delta_c) / sqrt(K)."""

    options = frozenset(("theta",))

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.phase_bias = nn.Parameter(torch.zeros(dims.n_heads, 1, dims.head_dim))

    def rotate(self, q_BHTK, k_BHTK, pos_BT):
        K = self.dims.head_dim
        inv_K = self.cfg["theta"] ** (-torch.arange(K, dtype=torch.float32, device=pos_BT.device) / K)
        phase_B1TK = (pos_BT.float()[..., None] * inv_K)[:, None]
        delta_H1K = self.phase_bias.float().clamp(-2 * math.pi, 0.0)

        def polar(x, phase):
            mu = F.softplus(x.float())
            return torch.cat((mu * phase.cos(), mu * phase.sin()), dim=-1).to(x.dtype)
        return polar(q_BHTK, phase_B1TK), polar(k_BHTK, phase_B1TK + delta_H1K)


# -- logit biases ------------------------------------------------------------------------------------------
class Bias(PE):
    """bias_at(t, h, dist, q_pos) on broadcast grids: h (1,H,1,1), causal distance (B,1,T,S), query position
    (B,1,T,1)."""

    options = frozenset(("per_layer",))

    @property
    def n_tables(self) -> int:
        return self.dims.n_layers if self.cfg.get("per_layer") else 1

    def bias(self, layer, pos_q_BT, pos_k_BS):
        t = layer if self.n_tables > 1 else 0
        h = torch.arange(self.dims.n_heads, device=pos_q_BT.device)[None, :, None, None]
        q_pos = pos_q_BT.float()[:, None, :, None]
        # future keys get distance 0: masked anyway, and log/pow stay finite there
        dist = (q_pos - pos_k_BS.float()[:, None, None, :]).clamp_min(0.0)
        out = self.bias_at(t, h, dist, q_pos)
        return out.expand(dist.shape[0], self.dims.n_heads, dist.shape[2], dist.shape[3])

    def bias_at(self, t, h, dist, q_pos):
        raise NotImplementedError


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Press et al. 2022: geometric slopes from 2^(-8/n); for n not a power of 2, the closest lower power
    p's slopes, then every other slope of 2p."""
    geometric = lambda n: [(2 ** (-8 / n)) ** (i + 1) for i in range(n)]
    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes[:n_heads], dtype=torch.float32)


@register("alibi")
class ALiBi(Bias):
    def bias_at(self, t, h, dist, q_pos):
        return -alibi_slopes(self.dims.n_heads).to(dist.device)[h] * dist


def t5_bucket(dist, num_buckets: int, max_distance: int):
    """T5's causal bucket: half exact, the rest log-spaced up to max_distance."""
    n = dist.long()
    max_exact = num_buckets // 2
    scaled = torch.log(n.clamp_min(max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp_max(num_buckets - 1)
    return torch.where(n < max_exact, n, large)


@register("t5")
class T5Bias(Bias):
    options = Bias.options | {"num_buckets", "max_distance"}

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.table_LNH = nn.Parameter(torch.zeros(self.n_tables, cfg["num_buckets"], dims.n_heads))

    def bias_at(self, t, h, dist, q_pos):
        return self.table_LNH[t][t5_bucket(dist, self.cfg["num_buckets"], self.cfg["max_distance"]), h]


@register("relative_learned")
class ClippedBias(Bias):
    options = Bias.options | {"max_distance"}

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.table_LHN = nn.Parameter(torch.zeros(self.n_tables, dims.n_heads, cfg["max_distance"] + 1))

    def bias_at(self, t, h, dist, q_pos):
        return self.table_LHN[t][h, dist.long().clamp_max(self.cfg["max_distance"])]


class Kerple(Bias):
    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.r1_LH = nn.Parameter(torch.zeros(self.n_tables, dims.n_heads))
        self.r2_LH = nn.Parameter(torch.zeros(self.n_tables, dims.n_heads))


@register("kerple_log")
class KerpleLog(Kerple):
    def bias_at(self, t, h, dist, q_pos):
        r1, r2 = self.r1_LH[t].clamp_min(1e-2)[h], self.r2_LH[t].clamp_min(1e-2)[h]
        return -r1 * torch.log1p(r2 * dist)


@register("kerple_power")
class KerplePower(Kerple):
    def bias_at(self, t, h, dist, q_pos):
        r1, r2 = self.r1_LH[t].clamp_min(1e-2)[h], self.r2_LH[t].clamp(1e-2, 2.0)[h]
        powered = dist.clamp_min(1.0) ** r2
        return -r1 * torch.where(dist > 0, powered, torch.zeros_like(powered))


@register("fire")
class FIRE(Bias):
    """Li et al. 2024: an MLP (1 -> hidden -> heads) of psi(i - j) / psi(max(L, i)), psi(x) = log(1 + c x)."""

    options = Bias.options | {"hidden", "c_init", "threshold_init"}  # the inits only shaped training

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        n, hdim, H = self.n_tables, cfg["hidden"], dims.n_heads
        self.c_L = nn.Parameter(torch.zeros(n))
        self.threshold_L = nn.Parameter(torch.zeros(n))
        self.w1_LN = nn.Parameter(torch.zeros(n, hdim))
        self.b1_LN = nn.Parameter(torch.zeros(n, hdim))
        self.w2_LHN = nn.Parameter(torch.zeros(n, H, hdim))
        self.b2_LH = nn.Parameter(torch.zeros(n, H))

    def bias_at(self, t, h, dist, q_pos):
        c = self.c_L[t].clamp_min(1e-4)
        x = torch.log1p(c * dist) / torch.log1p(c * torch.maximum(q_pos, self.threshold_L[t]).clamp_min(1.0))
        hidden_BTSN = torch.relu(x[:, 0, ..., None] * self.w1_LN[t] + self.b1_LN[t])
        return self.b2_LH[t][:, None, None] + torch.einsum("btsn,hn->bhts", hidden_BTSN, self.w2_LHN[t])


# -- data-dependent ----------------------------------------------------------------------------------------
@register("fox")
class ForgetGate(PE):
    """FoX (Lin et al. 2025): f_t = sigmoid(w.x_t + b) per layer and head; bias c_i - c_j, c = cumsum(log f)."""

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.weight_LHD = nn.Parameter(torch.zeros(dims.n_layers, dims.n_heads, dims.d_model))
        self.bias_LH = nn.Parameter(torch.zeros(dims.n_layers, dims.n_heads))

    def token_features(self, layer, x_BTD):
        logit_BTH = x_BTD.float() @ self.weight_LHD[layer].float().t() + self.bias_LH[layer].float()
        return F.logsigmoid(logit_BTH).transpose(1, 2)

    def feature_bias(self, layer, pos_q_BT, pos_k_BS, feats_BHS):
        # left pads come first: a real query's and key's c differ by real tokens' gates only
        c_BHS = feats_BHS.float().cumsum(-1)
        c_BHT = c_BHS[..., c_BHS.shape[-1] - pos_q_BT.shape[-1]:]
        return c_BHT[..., :, None] - c_BHS[..., None, :]


@register("cope")
class CoPE(PE):
    """Golovneva et al. 2024: p_ij = sum_{t=j}^{i} sigmoid(q_i.k_t / sqrt(K)) (at most npos_max - 1), logit plus
    q_i . e[p_ij] / sqrt(K), e interpolated between integer positions; one table per layer (or shared)."""

    options = frozenset(("npos_max", "shared"))

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.npos_max = cfg.get("npos_max") or dims.seq_len + 1
        n_tables = 1 if cfg.get("shared") else dims.n_layers
        self.table_LKN = nn.Parameter(torch.zeros(n_tables, dims.head_dim, self.npos_max))

    def logits_mod(self, layer, q_BHTK, s_BHTS):
        e_KN = self.table_LKN[0 if self.cfg.get("shared") else layer].float()
        p_BHTS = torch.sigmoid(s_BHTS).flip(-1).cumsum(-1).flip(-1).clamp(max=self.npos_max - 1)
        z_BHTN = q_BHTK.float() @ e_KN
        lo_BHTS = p_BHTS.floor()
        w_BHTS = p_BHTS - lo_BHTS
        z = z_BHTN.gather(-1, lo_BHTS.long()) * (1 - w_BHTS) + z_BHTN.gather(-1, p_BHTS.ceil().long()) * w_BHTS
        return s_BHTS + z / math.sqrt(q_BHTK.shape[-1])


# -- absolute tables ---------------------------------------------------------------------------------------
class Table(PE):
    """Adds scale * table(pos) to the token embeddings; scale None means the variant's default."""

    options = frozenset(("scale",))
    default_scale = 1.0

    def table(self, pos_BT):
        raise NotImplementedError

    def embed(self, x_BTD, pos_BT):
        scale = self.cfg["scale"] if self.cfg.get("scale") is not None else self.default_scale
        return x_BTD + (self.table(pos_BT.float()) * scale).to(x_BTD.dtype)


@register("sinusoidal")
class Sinusoidal(Table):
    options = Table.options | {"base"}

    @property
    def default_scale(self):  # a table with per-channel RMS init_std, as loud as the token embeddings
        return self.dims.init_std * math.sqrt(2)

    def table(self, pos_BT):
        d = self.dims.d_model
        i = torch.arange(0, d, 2, device=pos_BT.device, dtype=torch.float32)
        angle_BTF = pos_BT[..., None] * self.cfg["base"] ** (-i / d)
        out = torch.empty(*pos_BT.shape, d, device=pos_BT.device, dtype=torch.float32)
        out[..., 0::2], out[..., 1::2] = torch.sin(angle_BTF), torch.cos(angle_BTF)
        return out


@register("sinonly")
class SineOnly(Sinusoidal):
    def table(self, pos_BT):
        d = self.dims.d_model
        i = torch.arange(d, device=pos_BT.device, dtype=torch.float32)
        return torch.sin(pos_BT[..., None] * self.cfg["base"] ** (-i / d))


@register("binary", "binary_norm", "decimal", "decimal_norm")
class Digits(Table):
    """layout `ours`: digit j of the position (least significant first) in channel j, `_norm` mapped to
    [-1, 1] / sqrt(n). layout `reference`: most significant first across all d_model channels (the last
    channel holds the lowest digit), `_norm` mapped to [-1, 1] with no 1/sqrt(n)."""

    options = Table.options | {"n_digits", "layout"}
    EXACT_POSITIONS = 2**24  # float32 positions are exact integers below this: no higher digit is ever nonzero

    @property
    def digit_base(self):
        return 2 if self.cfg["name"].startswith("binary") else 10

    @property
    def reference(self) -> bool:
        layout = self.cfg.get("layout", "ours")
        if layout not in ("ours", "reference"):
            raise ValueError(f"pe.layout={layout!r} is not implemented by modeling_posbench.py")
        return layout == "reference"

    @property
    def max_positions(self):
        if self.reference:
            return min(self.digit_base ** min(self.dims.d_model, 32), self.EXACT_POSITIONS)
        return self.digit_base ** self.cfg["n_digits"]

    def digits(self, pos_BT, n):
        p = pos_BT.long()
        return ((p[..., None] // self.digit_base ** torch.arange(n, device=p.device)) % self.digit_base).float()

    def to_unit(self, digits):
        return 2 * digits / (self.digit_base - 1) - 1

    def table(self, pos_BT):
        d, norm = self.dims.d_model, self.cfg["name"].endswith("_norm")
        out = torch.zeros(*pos_BT.shape, d, device=pos_BT.device, dtype=torch.float32)
        if self.reference:
            n = min(d, math.ceil(math.log(self.EXACT_POSITIONS, self.digit_base)))
            out[..., d - n:] = self.digits(pos_BT, n).flip(-1)
            return self.to_unit(out) if norm else out
        n = self.cfg["n_digits"]
        digits_BTN = self.digits(pos_BT, n)
        out[..., :n] = self.to_unit(digits_BTN) / n ** 0.5 if norm else digits_BTN
        return out


@register("integer")
class Integer(Table):
    options = Table.options | {"max_positions"}

    @property
    def max_positions(self):
        return self.cfg.get("max_positions") or self.dims.seq_len

    def table(self, pos_BT):
        return (pos_BT / self.max_positions)[..., None].expand(*pos_BT.shape, self.dims.d_model)


@register("learned", "sininit")
class Learned(PE):
    """A learned table of max_positions vectors (sininit: trained from the sinusoidal table)."""

    options = frozenset(("max_positions", "scale", "layer_norm", "init_std"))

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.table = nn.Embedding(self.max_positions, dims.d_model)
        self.norm = nn.LayerNorm(dims.d_model) if cfg.get("layer_norm") else nn.Identity()

    @property
    def max_positions(self):
        return self.cfg.get("max_positions") or self.dims.seq_len

    def embed(self, x_BTD, pos_BT):
        return self.norm(x_BTD + (self.table(pos_BT.long()) * self.cfg["scale"]).to(x_BTD.dtype))


# -- wrappers ----------------------------------------------------------------------------------------------
@register("hybrid")
class Hybrid(PE):
    """Layer i uses pattern[i % len(pattern)] (members act inside attention only)."""

    options = frozenset(("pattern",))

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.members = nn.ModuleList(build_pe(m, dims) for m in cfg["pattern"])

    @property
    def max_positions(self):
        limits = [m.max_positions for m in self.members if m.max_positions is not None]
        return min(limits) if limits else None

    @property
    def pads_ok(self):
        return all(m.pads_ok for m in self.members)

    def layer_pe(self, layer):
        return self.members[layer % len(self.members)]


@register("rnope_swa")
class RNoPESWA(Hybrid):
    """RNoPE-SWA: `swa_layers` RoPE layers with a sliding window of `window` keys, then one NoPE layer, cycling."""

    options = frozenset(("window", "swa_layers", "rope"))

    def __init__(self, cfg, dims):
        pattern = [cfg["rope"]] * cfg["swa_layers"] + [{"name": "none"}]
        super().__init__({**cfg, "pattern": pattern}, dims)
        self.cfg = cfg

    def layer_window(self, layer):
        return self.cfg["window"] if layer % (self.cfg["swa_layers"] + 1) < self.cfg["swa_layers"] else None


@register("randomized")
class Randomized(PE):
    """Ruoss et al. 2023: T sorted positions drawn from [0, range) for a sequence of T tokens; at evaluation
    from a generator seeded by (eval_seed, T), so a sequence's positions depend on its length: no KV cache."""

    options = frozenset(("inner", "max_positions", "sample_at_eval", "eval_seed"))

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.range = cfg.get("max_positions") or 8 * dims.seq_len
        self.inner = build_pe(cfg["inner"], replace(dims, seq_len=self.range))
        self.whole_sequence = bool(cfg.get("sample_at_eval", True))

    @property
    def max_positions(self):
        return self.range

    @property
    def pads_ok(self):
        # drawn positions belong to a whole unpadded sequence of T tokens (seeded by T)
        return not self.whole_sequence and self.inner.pads_ok

    def positions(self, index_BS):
        self.check(int(index_BS.max().item()) + 1 if index_BS.numel() else 0)
        if not (self.training or self.whole_sequence):
            return self.inner.positions(index_BS)
        S = index_BS.shape[-1]
        if index_BS.shape[0] != 1 or int(index_BS[0, 0]) != 0:
            raise ValueError("randomized positions are drawn for a whole unpadded sequence; decode without a KV "
                             "cache")
        gen = None if self.training else torch.Generator().manual_seed(self.cfg.get("eval_seed", 0) * 1_000_003 + S)
        drawn_S = torch.randperm(self.range, generator=gen)[:S].sort().values
        return drawn_S.to(device=index_BS.device, dtype=torch.float32)[None]

    def embed(self, x_BTD, pos_BT):
        return self.inner.embed(x_BTD, pos_BT)

    def layer_pe(self, layer):
        return self.inner.layer_pe(layer)

    def layer_window(self, layer):
        return self.inner.layer_window(layer)


# -- packed documents (posbench's model.packing) -----------------------------------------------------------
# posbench can train on windows split into documents at a boundary token (`bos_id`): mask=document stops attention
# at a document's start, positions=document restarts positions there (posbench/model/packing.py). The fields and
# values implemented here; any other is refused, as PE options are.
PACKING_VALUES = {"mask": ("causal", "document"), "positions": ("window", "document")}
DOCUMENTS_ATTR = "posbench_documents"  # where a DynamicCache carries the documents of its keys between calls


def check_packing(packing: dict | None, pe: PE) -> dict | None:
    """The packing config if it splits rows into documents (a switch on and a bos_id), None if it does not;
    ValueError for a field or value this file does not implement."""
    if not packing:
        return None
    unknown = set(packing) - set(PACKING_VALUES) - {"bos_id"}
    if unknown:
        raise ValueError(f"packing: field(s) {sorted(unknown)} are not implemented by modeling_posbench.py")
    for key, values in PACKING_VALUES.items():
        if packing.get(key, values[0]) not in values:
            raise ValueError(f"packing.{key}={packing.get(key)!r} is not implemented (one of {list(values)})")
    bos_id = packing.get("bos_id")
    if bos_id is not None and (not isinstance(bos_id, int) or bos_id < 0):
        raise ValueError(f"packing.bos_id must be a token id >= 0, got {bos_id!r}")
    packing = {key: packing.get(key, values[0]) for key, values in PACKING_VALUES.items()} | {"bos_id": bos_id}
    if bos_id is None or (packing["mask"], packing["positions"]) == ("causal", "window"):
        return None
    if pe.whole_sequence and packing["positions"] == "document":
        # posbench draws one set of randomized positions per document; this file draws one per sequence
        raise ValueError("randomized positions drawn per document (packing.positions=document with "
                         "pe.sample_at_eval=true) are not implemented by modeling_posbench.py")
    return packing


@dataclass
class Documents:
    """One call's documents: each new token's document (doc_q_BT), each key's document and index within it
    (doc_k_BS, within_BS; cached keys first), and what the next call continues from: each row's last document
    (last_doc_B) and the token index where it started (start_B), as posbench's KVCache.documents."""

    doc_q_BT: torch.Tensor
    doc_k_BS: torch.Tensor
    within_BS: torch.Tensor
    last_doc_B: torch.Tensor
    start_B: torch.Tensor


def split_documents(ids_BT, index_BT, keep_BT, bos_id: int, before: Documents | None) -> Documents:
    """The documents of T new tokens at token indices index_BT (keep_BT: real tokens, None = all), continuing
    `before` (the cached keys' documents; None for a sequence's first call). A document starts at each bos_id;
    tokens before the first one form a document of their own, as in posbench. A pad never starts one."""
    is_bos_BT = ids_BT == bos_id
    if keep_BT is not None:
        is_bos_BT = is_bos_BT & keep_BT
    doc_BT = is_bos_BT.long().cumsum(1)
    start_BT = torch.where(is_bos_BT, index_BT, torch.full_like(index_BT, -1)).cummax(1).values
    if before is None:
        start_BT = start_BT.clamp_min(0)
    else:
        doc_BT = doc_BT + before.last_doc_B[:, None]
        start_BT = torch.maximum(start_BT, before.start_B[:, None])
    within_BT = index_BT - start_BT
    doc_k_BS, within_BS = doc_BT, within_BT
    if before is not None:
        doc_k_BS = torch.cat((before.doc_k_BS, doc_BT), dim=1)
        within_BS = torch.cat((before.within_BS, within_BT), dim=1)
    return Documents(doc_BT, doc_k_BS, within_BS, doc_BT[:, -1], start_BT[:, -1])


# -- the decoder -------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: PosbenchConfig):
        super().__init__()
        D = cfg.hidden_size
        self.n_heads, self.head_dim = cfg.num_attention_heads, D // cfg.num_attention_heads
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else nn.Identity()

    def forward(self, x_BTD, pos_BT, pos_BS, allowed_BTS, pe: PE, layer: int, cache):
        """pos_BS: the positions of every key, cached and new; allowed_BTS: which keys each query sees."""
        B, T, D = x_BTD.shape
        qkv = self.qkv(x_BTD).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = pe.rotate(self.q_norm(qkv[0]), self.k_norm(qkv[1]), pos_BT)
        v = qkv[2]
        feats_BHT = pe.token_features(layer, x_BTD)
        if feats_BHT is not None:  # cached beside the keys, as one more channel
            k = torch.cat((k, feats_BHT[..., None].to(k.dtype)), dim=-1)
        if cache is not None:
            k, v = cache.update(k, v, layer)
        feats_BHS = None
        if feats_BHT is not None:
            k, feats_BHS = k[..., :-1], k[..., -1]
        S = pos_BS.shape[-1]
        if k.shape[2] != S:
            # a cache that returns preallocated slots (StaticCache) would have the padding slots attended
            raise ValueError(f"the cache returned {k.shape[2]} keys for {S} tokens; modeling_posbench.py supports "
                             "transformers' DynamicCache only (leave cache_implementation unset)")
        s_BHTS = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.head_dim)
        bias_BHTS = pe.feature_bias(layer, pos_BT, pos_BS, feats_BHS)
        if bias_BHTS is not None:
            s_BHTS = s_BHTS + bias_BHTS
        s_BHTS = pe.logits_mod(layer, q, s_BHTS.masked_fill(~allowed_BTS[:, None], float("-inf")))
        p_BHTS = torch.softmax(s_BHTS, dim=-1)
        out_BHTK = (p_BHTS @ v.float()).to(x_BTD.dtype)
        return self.proj(out_BHTK.transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, cfg: PosbenchConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: PosbenchConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg)
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
        dims = Dims(config.hidden_size, config.num_attention_heads, config.num_hidden_layers,
                    config.max_position_embeddings, config.init_std)
        self.pe = build_pe(config.pe, dims)
        self.packing = check_packing(getattr(config, "packing", None), self.pe)
        if config.embed_scale not in EMBED_SCALES:
            raise ValueError(f"embed_scale={config.embed_scale!r} is not implemented by modeling_posbench.py")
        self.embed_scale = EMBED_SCALES[config.embed_scale](config.hidden_size)
        self.tok_emb = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.windows = [self.layer_window(config, layer) for layer in range(config.num_hidden_layers)]
        self.post_init()

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
        by_window = {None: allowed_BTS}
        for w in set(self.windows) - {None}:
            by_window[w] = allowed_BTS & (query_T[:, None] - slot_S[None, :] < w)[None]
        for layer, block in enumerate(self.blocks):
            x = block(x, pos_BT, pos_BS, by_window[self.windows[layer]], self.pe.layer_pe(layer), layer, cache)
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
                                 "not per row; pass unpadded sequences of equal length")
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
