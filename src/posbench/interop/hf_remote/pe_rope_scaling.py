"""RoPE scalings of posbench's remote code (torch only): each a transform of the inverse frequencies, as posbench's
pe/rope_scaling.py, so they apply to every rotary PE. SCALINGS: name -> (the options it reads besides `name`,
transform(inv_F, pos_BT, cfg, original) -> (inv_F, attention scale)); `original` is the length it was trained at.
"""

from __future__ import annotations

import math

import torch

SCALINGS: dict[str, tuple[frozenset, object]] = {}


def check_scaling(cfg: dict, where: str) -> None:
    """ValueError for a scaling, or an option of it, not implemented here."""
    if cfg.get("name") not in SCALINGS:
        raise ValueError(f"{where}: RoPE scaling `{cfg.get('name')}` is not implemented by posbench's remote code")
    unknown = set(cfg) - {"name"} - SCALINGS[cfg["name"]][0]
    if unknown:
        raise ValueError(f"{where}: option(s) {sorted(unknown)} are not implemented by posbench's remote code")


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
