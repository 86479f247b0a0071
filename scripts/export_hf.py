#!/usr/bin/env python
"""Export a checkpoint as a Hugging Face transformers model directory (config, safetensors, tokenizer, card).

    python scripts/export_hf.py checkpoints/tiny_rope_2.35B_s42/latest exports/tiny_rope
    python -c "from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained('exports/tiny_rope')"

RoPE (scaling none, pi or yarn) and NoPE checkpoints become a standard Qwen3ForCausalLM; other PEs are refused
with the reason (no transformers architecture computes them). Needs `pip install -e '.[hf]'`.
The command is `posbench export` (posbench/cli/export.py).
"""

from posbench.cli.export import main

if __name__ == "__main__":
    raise SystemExit(main())
