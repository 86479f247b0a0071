"""What a command's start imports: loading a config (what every command does before its first check of the input)
imports neither torch's compiler nor the plotting stack, which add seconds to every start and to every bad-input
error (torch._dynamo about 2 s on a 2-core machine: sdpa_bias_kernel.py's disable is lazy for that reason)."""

import json
import subprocess
import sys

HEAVY = ["torch._dynamo", "torch._inductor", "matplotlib", "transformers", "wandb"]

PROBE = f"""
import json, sys
from posbench.config import load_config
load_config(model_size="nano", pe_type="alibi", overrides=["model.attention=sdpa_bias"])
import posbench.model.build, posbench.cli.main
print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
"""


def test_loading_a_config_imports_no_compiler_or_plotting():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
