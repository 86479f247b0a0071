"""Eval options as a user types them: tasks named by a string, token counts beside every perplexity, help texts
that end where their sentence does."""

import pytest

from posbench.cli import export, study, sweep
from posbench.config_loader import to_dict
from posbench.evaluation.eval_config import load_eval_config
from posbench.evaluation.suites.ppl import Perplexity


def test_a_task_list_takes_bare_names():
    """Item 8: `--set long_context.tasks=[niah_single]` means the task with its defaults, as
    `[{name: niah_single}]` does (it failed: "expected a mapping for TaskConfig")."""
    bare = load_eval_config(overrides=["long_context.tasks=[niah_single, kv_retrieval]"])
    full = load_eval_config(overrides=["long_context.tasks=[{name: niah_single}, {name: kv_retrieval}]"])
    assert to_dict(bare.long_context) == to_dict(full.long_context)
    assert [t.name for t in bare.long_context.tasks] == ["niah_single", "kv_retrieval"]


def test_perplexity_markdown_states_the_tokens_scored():
    """Item 8: a perplexity figure without its token count cannot be compared (131,072 vs 32,768 scored
    tokens gave 4.57 and 4.30); the eval report's table and its comparison state them."""
    result = {"data": "text", "train_len": 64, "protocols": ["nonoverlap"], "positions": "the model's own",
              "rows": [{"length": 64, "na": None, "nonoverlap": {"loss": 1.5, "ppl": 4.48, "tokens": 32768}}]}
    assert "32,768" in Perplexity.markdown(result)
    assert "4.48 (32,768 tokens)" in Perplexity.comparison({"a": result})


@pytest.mark.parametrize("module", [export, study, sweep])
def test_command_help_descriptions_end_with_their_sentence(module, capsys):
    """Item 8: `posbench sweep --help` ended "..., evaluate the final checkpoints, and"."""
    with pytest.raises(SystemExit):
        module.main(["--help"])
    out = capsys.readouterr().out
    description = out.split("\n\n")[1].strip()
    assert description.endswith("."), description
