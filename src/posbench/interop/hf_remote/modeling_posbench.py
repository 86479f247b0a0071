"""A pos-enc-bench decoder for `transformers` (remote code: imports torch and transformers only, never posbench).

Written next to an exported checkpoint (posbench.interop.hf_export) and loaded with
`AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`. Parameter names are posbench's own, so
the checkpoint loads unchanged. Every positional encoding posbench registers has a small class here, found
through the PE_CLASSES registry by the name in `config.pe`; each class lists the config fields it reads
(`options`), and a config with any other field is refused, so a PE option this file does not implement can
never load as a silently different model.

Shape legend: B batch, H heads, T new tokens, S cached + new tokens, K head dim, D model dim, F K/2.
The PE contract, as in posbench: positions(T, offset) -> float32 positions; embed(x, pos) adds absolute
tables; rotate(q, k, pos) for the RoPE family; bias(layer, pos_q, pos_k) -> (H, T, S) logit bias or None;
layer_pe(layer) the PE a layer uses (per-layer hybrids). Attention is the explicit-softmax reference in
float32. The KV cache (transformers' DynamicCache) holds rotated keys, as posbench's does; keys sit at
positions 0..S-1, because positions are token indices for every PE except randomized ones, which never cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_posbench import PosbenchConfig

PE_CLASSES: dict[str, type[PE]] = {}
SCALINGS: dict[str, tuple[frozenset, object]] = {}  # name -> (options, transform(inv_F, pos_T, cfg, original))


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
    if "inner" in cfg:
        check_pe_config(cfg["inner"], f"{where}.inner")


# model.embed_scale -> the token embeddings' multiplier for a model width d (Vaswani et al. 2017, section 3.4)
EMBED_SCALES = {"none": lambda d: 1.0, "sqrt_d": lambda d: math.sqrt(d)}


def build_pe(cfg: dict, dims: Dims) -> PE:
    return PE_CLASSES[cfg["name"]](cfg, dims)


class PE(nn.Module):
    options: frozenset = frozenset()  # config fields besides `name` this class implements
    whole_sequence = False  # positions depend on the whole sequence: no KV cache

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

    def positions(self, T: int, offset: int, device) -> torch.Tensor:
        self.check(offset + T)
        return torch.arange(offset, offset + T, device=device, dtype=torch.float32)

    def embed(self, x_BTD, pos_T):
        return x_BTD

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        return q_BHTK, k_BHTK

    def bias(self, layer: int, pos_q_T, pos_k_S):
        return None

    def layer_pe(self, layer: int) -> PE:
        return self


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
def _none(inv_F, pos_T, cfg, original):
    return inv_F, 1.0


@scaling("pi")  # Chen et al. 2023: every frequency divided by the factor
def _pi(inv_F, pos_T, cfg, original):
    return inv_F / cfg["factor"], 1.0


@scaling("ntk")  # base b -> b * s^(d/(d-2)), as a per-frequency factor
def _ntk(inv_F, pos_T, cfg, original):
    return ntk_inv_freq(inv_F, cfg["factor"]), 1.0


@scaling("dynamic")  # NTK with the factor grown to the current length, only past the original length
def _dynamic(inv_F, pos_T, cfg, original):
    length = int(pos_T.max().item()) + 1 if pos_T.numel() else 0
    if length <= original:
        return inv_F, 1.0
    s = cfg["factor"] * length / original - (cfg["factor"] - 1)
    return ntk_inv_freq(inv_F, s), 1.0


@scaling("yarn", "beta_fast", "beta_slow", "truncate")
def _yarn(inv_F, pos_T, cfg, original):
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
def _yarn_paper(inv_F, pos_T, cfg, original):
    """Peng et al. 2023 eqs. 17-22 as written: the ramp is linear in L_train / wavelength."""
    r_F = original / (2 * math.pi / inv_F.clamp_min(1e-30))
    gamma_F = ((r_F - cfg["alpha"]) / (cfg["beta"] - cfg["alpha"])).clamp(0.0, 1.0)
    return (1 - gamma_F) * inv_F / cfg["factor"] + gamma_F * inv_F, yarn_mscale(cfg["factor"])


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x_BHTK, cos_TK, sin_TK):
    xf = x_BHTK.float()
    return (xf * cos_TK + rotate_half(xf) * sin_TK).to(x_BHTK.dtype)


@register("rope")
class Rotary(PE):
    """RoFormer rotation, "rotate half" layout: channel j pairs with j + K/2 at frequency inv_F[j mod K/2]."""

    options = frozenset(("theta", "scaling"))

    def inv_freq(self):
        K = self.dims.head_dim
        return self.cfg["theta"] ** (-torch.arange(0, K, 2, dtype=torch.float32) / K)

    def cos_sin(self, pos_T):
        s = self.cfg.get("scaling") or {"name": "none"}
        original = s.get("original_max_positions") or self.dims.seq_len
        inv_F, mscale = SCALINGS[s["name"]][1](self.inv_freq().float().to(pos_T.device), pos_T, s, original)
        angle_TF = pos_T.float()[:, None] * inv_F[None, :]
        angle_TK = torch.cat((angle_TF, angle_TF), dim=-1)
        return angle_TK.cos() * mscale, angle_TK.sin() * mscale

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        cos_TK, sin_TK = self.cos_sin(pos_T)
        return apply_rotary(q_BHTK, cos_TK, sin_TK), apply_rotary(k_BHTK, cos_TK, sin_TK)


@register("lrope")
class LearnedRotary(Rotary):
    """RoPE whose per-frequency rates are parameters (trained from RoPE's)."""

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.inv_freq_param = nn.Parameter(torch.zeros(dims.head_dim // 2))

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


@register("xpos")
class XPos(Rotary):
    """RoPE with q scaled by zeta^(n/B) and k by zeta^(-m/B): q.k decays by zeta^((n-m)/B) per frequency."""

    options = Rotary.options | {"gamma", "scale_base"}

    def rotate(self, q_BHTK, k_BHTK, pos_T):
        cos_TK, sin_TK = self.cos_sin(pos_T)
        K = self.dims.head_dim
        zeta_F = (torch.arange(0, K, 2, device=pos_T.device, dtype=torch.float32) / K + self.cfg["gamma"]) \
            / (1 + self.cfg["gamma"])
        scale_TF = zeta_F[None, :] ** (pos_T.float()[:, None] / self.cfg["scale_base"])
        scale_TK = torch.cat((scale_TF, scale_TF), dim=-1)
        return (apply_rotary(q_BHTK, cos_TK * scale_TK, sin_TK * scale_TK),
                apply_rotary(k_BHTK, cos_TK / scale_TK, sin_TK / scale_TK))


# -- logit biases ------------------------------------------------------------------------------------------
class Bias(PE):
    """bias_at(t, h, dist, q_pos) on broadcast grids: h (H,1,1), causal distance and query position (1,T,S)."""

    options = frozenset(("per_layer",))

    @property
    def n_tables(self) -> int:
        return self.dims.n_layers if self.cfg.get("per_layer") else 1

    def bias(self, layer, pos_q_T, pos_k_S):
        t = layer if self.n_tables > 1 else 0
        h = torch.arange(self.dims.n_heads, device=pos_q_T.device)[:, None, None]
        q_pos = pos_q_T.float()[None, :, None]
        # future keys get distance 0: masked anyway, and log/pow stay finite there
        dist = (q_pos - pos_k_S.float()[None, None, :]).clamp_min(0.0)
        out = self.bias_at(t, h, dist, q_pos)
        return out.expand(self.dims.n_heads, pos_q_T.shape[0], pos_k_S.shape[0])

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
        hidden_TSN = torch.relu(x[0, ..., None] * self.w1_LN[t] + self.b1_LN[t])
        return self.b2_LH[t][:, None, None] + torch.einsum("tsn,hn->hts", hidden_TSN, self.w2_LHN[t])


# -- absolute tables ---------------------------------------------------------------------------------------
class Table(PE):
    """Adds scale * table(pos) to the token embeddings; scale None means the variant's default."""

    options = frozenset(("scale",))
    default_scale = 1.0

    def table(self, pos_T):
        raise NotImplementedError

    def embed(self, x_BTD, pos_T):
        scale = self.cfg["scale"] if self.cfg.get("scale") is not None else self.default_scale
        return x_BTD + (self.table(pos_T.float()) * scale).to(x_BTD.dtype)


@register("sinusoidal")
class Sinusoidal(Table):
    options = Table.options | {"base"}

    @property
    def default_scale(self):  # a table with per-channel RMS init_std, as loud as the token embeddings
        return self.dims.init_std * math.sqrt(2)

    def table(self, pos_T):
        d = self.dims.d_model
        i = torch.arange(0, d, 2, device=pos_T.device, dtype=torch.float32)
        angle_TF = pos_T[:, None] * self.cfg["base"] ** (-i / d)[None, :]
        out = torch.empty(pos_T.shape[0], d, device=pos_T.device, dtype=torch.float32)
        out[:, 0::2], out[:, 1::2] = torch.sin(angle_TF), torch.cos(angle_TF)
        return out


@register("sinonly")
class SineOnly(Sinusoidal):
    def table(self, pos_T):
        d = self.dims.d_model
        i = torch.arange(d, device=pos_T.device, dtype=torch.float32)
        return torch.sin(pos_T[:, None] * self.cfg["base"] ** (-i / d)[None, :])


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

    def digits(self, pos_T, n):
        p = pos_T.long()
        return ((p[:, None] // self.digit_base ** torch.arange(n, device=p.device)[None, :]) % self.digit_base).float()

    def to_unit(self, digits):
        return 2 * digits / (self.digit_base - 1) - 1

    def table(self, pos_T):
        d, norm = self.dims.d_model, self.cfg["name"].endswith("_norm")
        out = torch.zeros(pos_T.shape[0], d, device=pos_T.device, dtype=torch.float32)
        if self.reference:
            n = min(d, math.ceil(math.log(self.EXACT_POSITIONS, self.digit_base)))
            out[:, d - n:] = self.digits(pos_T, n).flip(-1)
            return self.to_unit(out) if norm else out
        n = self.cfg["n_digits"]
        digits_TN = self.digits(pos_T, n)
        out[:, :n] = self.to_unit(digits_TN) / n ** 0.5 if norm else digits_TN
        return out


@register("integer")
class Integer(Table):
    options = Table.options | {"max_positions"}

    @property
    def max_positions(self):
        return self.cfg.get("max_positions") or self.dims.seq_len

    def table(self, pos_T):
        return (pos_T / self.max_positions)[:, None].expand(-1, self.dims.d_model)


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

    def embed(self, x_BTD, pos_T):
        return self.norm(x_BTD + (self.table(pos_T.long()) * self.cfg["scale"]).to(x_BTD.dtype))


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

    def layer_pe(self, layer):
        return self.members[layer % len(self.members)]


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

    def positions(self, T, offset, device):
        self.check(offset + T)
        if not (self.training or self.whole_sequence):
            return self.inner.positions(T, offset, device)
        if offset:
            raise ValueError("randomized positions are drawn for a whole sequence; decode without a KV cache")
        gen = None if self.training else torch.Generator().manual_seed(self.cfg.get("eval_seed", 0) * 1_000_003 + T)
        return torch.randperm(self.range, generator=gen)[:T].sort().values.to(device=device, dtype=torch.float32)

    def embed(self, x_BTD, pos_T):
        return self.inner.embed(x_BTD, pos_T)

    def layer_pe(self, layer):
        return self.inner.layer_pe(layer)


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

    def forward(self, x_BTD, pos_T, pe: PE, layer: int, cache):
        B, T, D = x_BTD.shape
        qkv = self.qkv(x_BTD).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = pe.rotate(self.q_norm(qkv[0]), self.k_norm(qkv[1]), pos_T)
        v = qkv[2]
        pos_S = pos_T
        if cache is not None:
            k, v = cache.update(k, v, layer)
            pos_S = torch.arange(k.shape[2], device=x_BTD.device, dtype=torch.float32)
        S = k.shape[2]
        s_BHTS = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.head_dim)
        bias_HTS = pe.bias(layer, pos_T, pos_S)
        if bias_HTS is not None:
            s_BHTS = s_BHTS + bias_HTS
        allowed = torch.ones(T, S, dtype=torch.bool, device=x_BTD.device).tril(diagonal=S - T)
        p_BHTS = torch.softmax(s_BHTS.masked_fill(~allowed, float("-inf")), dim=-1)
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

    def forward(self, x, pos_T, pe, layer, cache):
        x = x + self.attn(self.attn_norm(x), pos_T, pe, layer, cache)
        return x + self.mlp(self.mlp_norm(x))


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
        if config.embed_scale not in EMBED_SCALES:
            raise ValueError(f"embed_scale={config.embed_scale!r} is not implemented by modeling_posbench.py")
        self.embed_scale = EMBED_SCALES[config.embed_scale](config.hidden_size)
        self.tok_emb = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

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

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None, labels=None,
                logits_to_keep=0, **kwargs):
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            # positions are token indices and the model was trained without padding: a pad would shift them
            raise ValueError("padded batches are not supported: pass unpadded sequences of equal length")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if self.pe.whole_sequence:
            if past_key_values is not None and past_key_values.get_seq_length() > 0:
                raise ValueError("this model's positions are drawn for a whole sequence (randomized PE): "
                                 "generate with use_cache=False")
            use_cache, past_key_values = False, None
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        if not use_cache:
            past_key_values = None
        offset = past_key_values.get_seq_length() if past_key_values is not None else 0
        pos_T = self.pe.positions(input_ids.shape[1], offset, input_ids.device)
        x = self.tok_emb(input_ids)
        x = self.pe.embed(x * self.embed_scale if self.embed_scale != 1.0 else x, pos_T)
        for layer, block in enumerate(self.blocks):
            x = block(x, pos_T, self.pe.layer_pe(layer), layer, past_key_values)
        h = self.norm(x)
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            h = h[:, -logits_to_keep:]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=past_key_values)
