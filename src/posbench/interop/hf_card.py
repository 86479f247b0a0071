"""The export's model card (README.md): what was trained and how to load it without posbench, the training config,
tokens seen, and the checkpoint's evaluation summaries where present."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from posbench.config import RunConfig
from posbench.config_loader import dump_yaml
from posbench.data.tokenizers import BOS
from posbench.interop.hf_qwen3 import position_free


def model_card(run_cfg: RunConfig, meta: dict, step_dir: Path, kind: str, why_remote: str | None,
               bos_id: int) -> str:
    load = "from_pretrained(path, trust_remote_code=True)" if why_remote else "from_pretrained(path)"
    evals = sorted((step_dir.parent / "eval").glob("*/summary.md")) if (step_dir.parent / "eval").is_dir() else []
    parts = [f"# {step_dir.parent.name} (posbench export)", "",
             f"A decoder-only language model trained with pos-enc-bench, positional encoding `{run_cfg.pe.name}`, "
             f"exported as `{kind}`: `AutoModelForCausalLM.{load}` "
             "loads it without posbench (the tokenizer: see Loading).", "",
             f"- step {meta.get('step')}, {meta.get('tokens', 0):,} training tokens, training length "
             f"{run_cfg.model.seq_len} tokens", f"- tokenizer `{run_cfg.data.tokenizer.tag()}`", ""]
    if why_remote:
        parts += [f"Remote code: {why_remote}. `modeling_posbench.py` (torch and transformers only) implements "
                  "posbench's decoder, and posbench's own PE modules beside it (`pe_<module>.py`, imported by "
                  "`pe_zoo.py`) this PE; greedy generation uses the KV cache"
                  + (" except for randomized positions, which are drawn per sequence" if "randomized" in
                     json.dumps(dataclasses.asdict(run_cfg.pe)) else "") + ".", ""]
    elif position_free(run_cfg):
        dropped = " (DroPE after its drop: trained with RoPE, then recalibrated without it)" if run_cfg.pe.name != \
            "none" else ""
        parts += [f"NoPE{dropped} is written as Qwen3 with linear RoPE scaling by 1e30: every rotation angle is "
                  "below 1e-25 rad, so the model attends without positional information, as trained.", ""]
    parts += ["## Loading", "", "```python", "import transformers", "",
              f"model = transformers.AutoModelForCausalLM.{load}"]
    if why_remote:
        # AutoTokenizer reads config.json first, whose model type only the remote code defines: without
        # trust_remote_code it stops at transformers' "run the custom code?" prompt. The tokenizer itself is a
        # standard fast tokenizer (tokenizer.json), which its own class loads without any remote code.
        parts += ["tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(path)  # no remote code",
                  "# or: transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=True)"]
    else:
        parts += ["tokenizer = transformers.AutoTokenizer.from_pretrained(path)"]
    parts += ["```", "",
              f"The tokenizer adds `{BOS}` (id {bos_id}) before every text, as each training document began: "
              "`tokenizer(text)` gives what the model saw; `add_special_tokens=False` leaves it out.", ""]
    parts += ["## Training configuration", "", "```yaml", dump_yaml(run_cfg).rstrip(), "```", ""]
    for summary in evals:
        parts += [f"## Evaluation ({summary.parent.name})", "", summary.read_text().strip(), ""]
    return "\n".join(parts)
