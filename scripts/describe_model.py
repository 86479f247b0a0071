#!/usr/bin/env python
"""Parameter count, FLOPs per token and attention kernel of a configuration, without allocating
weights (meta device).

    python scripts/describe_model.py --model-size tiny --pe-type alibi
    python scripts/describe_model.py --model-size small --pe-type rope --device cpu
"""

from __future__ import annotations

from collections import Counter

from posbench.cli.errors_cli import cli_entry
from posbench.config import config_from_args, config_parser
from posbench.model.flops import model_stats


def fmt(n: float) -> str:
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


@cli_entry
def main(argv=None) -> int:
    p = config_parser(__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="device whose kernel choice to report (default: cuda)")
    args = p.parse_intermixed_args(argv)
    cfg = config_from_args(args)  # bad input: one line `error: ...` from cli_entry
    m = cfg.model
    s = model_stats(m, cfg.pe, args.device)
    kernels = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in Counter(s.kernels).items())
    # windowed layers score min(W, seq_len) keys per query instead of seq_len (model/flops.py)
    keys = "seq_len" if all(w is None for w in s.windows) else "sum over layers of min(window, seq_len)"
    per_layer = "layers*" if keys == "seq_len" else ""
    windows = ", ".join("full" if w is None else str(w) for w in s.windows) or "none"
    rows = [
        ("model", f"{m.size}: d_model={m.d_model} layers={m.n_layers} heads={m.n_heads} d_ff={m.d_ff} "
                  f"seq_len={m.seq_len} vocab={m.vocab_size} tied={m.tie_embeddings}"),
        ("positional encoding", f"{cfg.pe.name}"),
        ("parameters", f"{s.params_total:,} ({fmt(s.params_total)})"),
        ("  token embedding", f"{s.params_embedding:,}"),
        ("  positional encoding", f"{s.params_pe:,}"),
        ("  in matmuls (N)", f"{s.params_matmul:,} (non-embedding + LM head)"),
        ("FLOPs/token, train", f"{fmt(s.flops_per_token_train)}  = 6*N + 12*{per_layer}d_model*{keys}"
                               + (f" + PE {fmt(s.flops_pe_train)}" if s.flops_pe_train else "")),
        ("FLOPs/token, forward", f"{fmt(s.flops_per_token_forward)}  = 2*N + 4*{per_layer}d_model*{keys}"
                                 + (f" + PE {fmt(s.flops_pe_forward)}" if s.flops_pe_forward else "")),
        (f"attention kernel ({args.device})", kernels),
        ("attention window", windows),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
