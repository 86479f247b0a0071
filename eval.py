#!/usr/bin/env python
"""Evaluate checkpoints: perplexity vs length, algorithmic tasks (ID/OOD), passkey, needle in a haystack.

    python eval.py checkpoints/tiny_rope_2.35B_s42/latest --suite all
    python eval.py ckpt_a ckpt_b ckpt_c --suite ppl --lengths 512,1024,2048,4096,8192
    python eval.py ckpt --suite ppl,passkey --rope-scaling yarn --rope-factor 4 --out evals/yarn4
"""

from posbench.cli.eval import main_eval

if __name__ == "__main__":
    raise SystemExit(main_eval())
