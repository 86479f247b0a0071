"""NoPE: no positional information at all; causal masking alone lets a decoder infer order
(Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization")."""

from posbench.pe.encoding import PES, PositionalEncoding


@PES.register("none")
class NoPE(PositionalEncoding):
    kind = "none"
    summary = "NoPE: no positional encoding; order comes only from the causal mask"
