"""Export a checkpoint as a Hugging Face transformers model directory (config, safetensors, tokenizer, card).

    python scripts/export_hf.py checkpoints/tiny_rope_2.35B_s42/latest exports/tiny_rope
    python -c "from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained('exports/tiny_rope')"

RoPE (scaling none, pi or yarn) and NoPE checkpoints become a standard Qwen3ForCausalLM; every other PE exports
as remote code (`trust_remote_code=True`: posbench's decoder and its own PE modules in the directory). Before the
files are moved into place, the export is loaded back and compared with posbench on a full forward and in a short greedy
generation with and without the KV cache, in a staging directory beside out_dir that is then renamed into place:
a non-empty out_dir is refused (exit 2) unless --overwrite, which replaces it whole. A failed check keeps
nothing and exits 4, saying what differed and by how much (--tolerance loosens the check for float noise).
Needs `pip install -e '.[hf]'`.
`posbench export ...` is the same command; the work is posbench/interop/hf_export.py's.
"""

from __future__ import annotations

import argparse

from posbench.cli.errors_cli import cli_entry


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", help="a step directory, a run's `latest`, or a run directory")
    p.add_argument("out_dir", help="the directory to write (created; a non-empty one is refused without --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty out_dir whole (the old one is removed once the new one is in place)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="the check's largest accepted logit difference, relative to the largest logit (default: "
                        "hf_verify.VERIFY_TOLERANCE, 1e-3, far above float32 noise, far below a wrong weight or "
                        "position); a failed check keeps nothing and says by how much it missed")
    args = p.parse_args(argv)
    from posbench.interop.hf_export import export

    export(args.checkpoint, args.out_dir, overwrite=args.overwrite,
           **({} if args.tolerance is None else {"tolerance": args.tolerance}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
