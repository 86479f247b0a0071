"""The position ids evaluation gives a PE that reads the data's own ids (abacus, coupled:
`PositionalEncoding.reads_data_positions`), so it reads text the way it trained on it.

A run whose shards carried ids (data/token_positions.py: a task document's digit places, TEXT_ID for every text
token) trained with them: abacus then saw row 0 for text, not the token index it uses without ids. Evaluating it
with its default positions would be another model input than training. So, for such a run:

    validation shards   their ids, windowed exactly as the tokens (suites/ppl.py)
    any other text      TEXT_ID for every token (text files, WikiText, PG-19, LAMBADA, retrieval prompts built
                        from filler shards, which never carry ids): what training gave its text tokens

Every other run (a PE that ignores ids, or data that wrote none) is evaluated with the model's own positions,
exactly as before: no ids are passed at all.
"""

from __future__ import annotations

import torch

from posbench.data.token_positions import TEXT_ID, writes_positions
from posbench.pe import PES

OWN = "the model's own"
SHARD_IDS = "the validation shards' per-token position ids, as in training"
TEXT_IDS = (f"TEXT_ID ({TEXT_ID}) for every token: this text carries no position ids, and the run trained with "
            "them (text tokens got TEXT_ID)")


def trained_with_ids(run_cfg) -> bool:
    """Whether the checkpoint's PE reads data ids and its training shards carried them."""
    return (run_cfg.train.stream == "shards" and PES.get(run_cfg.pe.name).reads_data_positions()
            and writes_positions(run_cfg.data.mix, run_cfg.data.tokenizer))


def text_positions(run_cfg) -> str:
    """What a suite that feeds text without ids says it gave the model (results' `positions`)."""
    return TEXT_IDS if trained_with_ids(run_cfg) else OWN


def text_ids(run_cfg, x_BT: torch.Tensor) -> dict:
    """Model kwargs for a batch of plain text `x_BT`: TEXT_ID per token for a run that trained with ids, else none
    (the model's own positions)."""
    return {"data_pos_BT": torch.full_like(x_BT, TEXT_ID)} if trained_with_ids(run_cfg) else {}
