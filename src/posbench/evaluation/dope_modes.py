"""What DoPE does to the heads it chose (Xiong et al., arXiv 2511.09146; posbench's reading of the equations,
docs/pe_defaults.md "DoPE"): one registered class per `dope.mode`, each a `HeadEdit` (model/head_edit.py) applied
after the model's own rotation, so every head it did not choose is left exactly as the PE rotated it.

    gaussian  the chosen heads' rotated keys replaced by eps ~ N(0, sigma^2 I)  (v1 eq. 36, sigma 1.0 from v2 A.2)
    all       the chosen heads' q and k zeroed: every logit 0, uniform attention over the prefix  (v1 eq. 35, v2 16)
    parts     in the chosen heads, the bands with theta_f <= 2 pi / L_train kept, the others zeroed in q and k
              (v1 eqs. 32-34, v2 eqs. 13-15 as written)

Shape legend: B batch, H heads, T new tokens, K head dim, P positions of one noise block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.model.head_edit import HeadEdit
from posbench.pe.rope import RotaryBase
from posbench.registry import Registry

DOPE_MODES = Registry("DoPE mode", where="dope.mode")
NOISE_BLOCK = 256  # positions per noise draw: eps at a position depends on (layer, head, position) alone


def noise_seed(seed: int, layer: int, head: int, block: int) -> int:
    """The 32-bit seed of one noise block's generator, mixed from (seed, layer, head, block) by numpy's SeedSequence:
    torch's CPU generator keeps 32 bits of its seed, so packing the indices into one integer would lose them."""
    return int(np.random.SeedSequence([seed, layer, head, block]).generate_state(1)[0])


@dataclass
class DopeModeConfig(Checked):
    name: str = "gaussian"

    @classmethod
    def registry_lookup(cls, name, where="dope.mode"):
        return DOPE_MODES.config(name, where)


class ChosenHeads(HeadEdit):
    """The edit of the heads `chosen` names ({layer: [head, ...]}); every other layer and head untouched."""

    def __init__(self, chosen: dict[int, list[int]]):
        self.chosen = {layer: list(heads) for layer, heads in chosen.items() if heads}

    def __call__(self, layer, q_in_BHTK, k_in_BHTK, q_BHTK, k_BHTK, pos_T):
        heads = self.chosen.get(layer)
        if heads is None:
            return q_BHTK, k_BHTK
        return self.change(layer, heads, q_BHTK.clone(), k_BHTK.clone(), pos_T)

    def change(self, layer: int, heads: list[int], q_BHTK, k_BHTK, pos_T):
        raise NotImplementedError


class DopeMode:
    name: ClassVar[str] = ""
    Config: ClassVar[type[DopeModeConfig]] = DopeModeConfig

    def __init__(self, cfg: DopeModeConfig):
        self.cfg = cfg

    def check_model(self, model: nn.Module, where: str) -> None:
        """Refuse, before any work, a model this mode cannot change (ConfigError naming what to use instead)."""

    def edit(self, chosen: dict[int, list[int]], model: nn.Module, train_len: int) -> ChosenHeads:
        raise NotImplementedError


class GaussianKeys(ChosenHeads):
    def __init__(self, chosen, sigma: float, seed: int):
        super().__init__(chosen)
        self.sigma, self.seed = sigma, seed
        self.blocks: dict[tuple[int, int, int, int], torch.Tensor] = {}

    def block(self, layer: int, head: int, b: int, K: int, device) -> torch.Tensor:
        """(P, K) unit normals of positions b*P .. b*P + P - 1: a CPU generator seeded from `seed` (42, v2 A.2) and
        the (layer, head, block) index, so the draw is the same whatever else is chosen or asked, on any device."""
        key = (layer, head, b, K)
        if key not in self.blocks:
            g = torch.Generator().manual_seed(noise_seed(self.seed, layer, head, b))
            self.blocks[key] = torch.randn(NOISE_BLOCK, K, generator=g, dtype=torch.float32).to(device)
        return self.blocks[key]

    def noise(self, layer: int, head: int, pos: torch.Tensor, K: int) -> torch.Tensor:
        """eps at integer positions `pos` (any shape) -> (*pos.shape, K)."""
        lo, hi = int(pos.min()) // NOISE_BLOCK, int(pos.max()) // NOISE_BLOCK
        table = torch.cat([self.block(layer, head, b, K, pos.device) for b in range(lo, hi + 1)])
        return table[pos - lo * NOISE_BLOCK]

    def change(self, layer, heads, q_BHTK, k_BHTK, pos_T):
        pos = pos_T.round().long()  # the tokens' positions (a decode step's are absolute: the cache's offset added)
        K = k_BHTK.shape[-1]
        for h in heads:
            eps = self.sigma * self.noise(layer, h, pos, K)  # (T, K) shared by the rows, or per row (B, T, K)
            k_BHTK[:, h] = eps.to(k_BHTK.dtype).expand_as(k_BHTK[:, h])
        return q_BHTK, k_BHTK


@DOPE_MODES.register("gaussian")
class Gaussian(DopeMode):
    """v1 eq. 36 K^{R,D} = m K^R + (1 - m) eps in its replacement form, on the keys (the headline's indicator); v2
    eq. 17's product (1 - m) eps K^R is not implemented: it is zero for every head not chosen, so it cannot be what
    the tables ran (docs/pe_defaults.md). The noise is a fixed function of (layer, head, position)."""

    @dataclass
    class Config(DopeModeConfig):
        sigma: float = 1.0  # v2 appendix A.2: N(0, 1), sigma = 1.0
        seed: int = 42  # v2 appendix A.2: "a fixed random seed (42)"

        def check(self) -> None:
            if not (math.isfinite(self.sigma) and self.sigma > 0):
                raise ConfigError(f"dope.mode.sigma must be a finite number > 0, got {self.sigma}")
            if not 0 <= self.seed < 2**15:
                raise ConfigError(f"dope.mode.seed must be in 0 .. 32767, got {self.seed}")

    def edit(self, chosen, model, train_len):
        return GaussianKeys(chosen, self.cfg.sigma, self.cfg.seed)


class ZeroHeads(ChosenHeads):
    def change(self, layer, heads, q_BHTK, k_BHTK, pos_T):
        q_BHTK[:, heads] = 0
        k_BHTK[:, heads] = 0
        return q_BHTK, k_BHTK


@DOPE_MODES.register("all")
class All(DopeMode):
    """v1 eq. 35 / v2 eq. 16 as written: K^{R,D} = m K^R, Q likewise, so a chosen head's logits are all 0 (uniform
    attention over its prefix). The prose's other reading (the head without RoPE) is documented, not implemented."""

    def edit(self, chosen, model, train_len):
        return ZeroHeads(chosen)


class KeepBands(ChosenHeads):
    def __init__(self, chosen, keep_LK: dict[int, torch.Tensor]):
        super().__init__(chosen)
        self.keep_LK = keep_LK

    def change(self, layer, heads, q_BHTK, k_BHTK, pos_T):
        keep_K = self.keep_LK[layer].to(q_BHTK.device, q_BHTK.dtype)
        q_BHTK[:, heads] = q_BHTK[:, heads] * keep_K
        k_BHTK[:, heads] = k_BHTK[:, heads] * keep_K
        return q_BHTK, k_BHTK


def standard_layout(pe) -> bool:
    """Whether `pe` rotates as RotaryBase does (rotate-half, channel j and j + R/2 at inv_F[j mod R/2], channels past
    R unrotated), so each channel's band frequency can be read from `inv_freq()`."""
    return isinstance(pe, RotaryBase) and type(pe).rotate is RotaryBase.rotate \
        and type(pe).rotate_rotary is RotaryBase.rotate_rotary and type(pe).cos_sin is RotaryBase.cos_sin


def channel_frequencies(pe, K: int) -> torch.Tensor:
    """(K,) each channel's trained band frequency theta_f (0 for channels that do not rotate, and for a layer whose
    PE is not rotary)."""
    if not isinstance(pe, RotaryBase):
        return torch.zeros(K)
    inv_F = pe.inv_freq().detach().float().cpu()
    return torch.cat((inv_F, inv_F, torch.zeros(K - 2 * inv_F.shape[0])))


@DOPE_MODES.register("parts")
class Parts(DopeMode):
    """v1 eqs. 32-34 / v2 eqs. 13-15 as written: K^{R,D} = sum_f m_f P_f^T P_f K^R with m_f = 1[theta_f <= 2 pi / L],
    L the training length, Q likewise: the low-frequency bands kept, the others zeroed. The prose of both versions
    says these bands are the ones removed, and v2's Figure 1 leaves them unrotated: documented, not implemented.
    theta_f is each band's trained frequency (before any --rope-scaling)."""

    def check_model(self, model, where):
        for layer in range(model.cfg.n_layers):
            pe = model.pe.layer_pe(layer)
            if isinstance(pe, RotaryBase) and not standard_layout(pe):
                raise ConfigError(f"{where}: dope.mode=parts reads each band's frequency from RoPE's rotate-half "
                                  f"layout, and PE `{pe.name}` (layer {layer}) rotates its own way; use "
                                  "dope.mode=gaussian or all")

    def edit(self, chosen, model, train_len):
        K = model.cfg.d_model // model.cfg.n_heads
        keep = {layer: (channel_frequencies(model.pe.layer_pe(layer), K) <= 2 * math.pi / train_len).float()
                for layer in chosen}
        return KeepBands(chosen, keep)
