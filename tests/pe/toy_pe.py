"""A positional encoding added in one file, as a new PE in src/posbench/pe/ is: a log-distance logit bias, steeper
per head, bias(h, d) = -log(1 + d) * (h + 1) / H. Imported only by tests/pe/test_pe_one_file.py, which registers it
for its own tests and removes it afterwards (so no other test sees the name)."""

import torch

from posbench.pe.bias import BiasPE
from posbench.pe.encoding import PES


@PES.register("toy_log_bias")
class ToyLogBias(BiasPE):
    summary = "toy: a log-distance logit bias, steeper per head (tests only)"

    def bias(self, t, h, dist, q_pos):
        return -torch.log1p(dist) * (h + 1) / self.ctx.n_heads
