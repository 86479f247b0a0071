"""The position ids evaluation gives a PE that reads the data's own ids (abacus, coupled:
`PositionalEncoding.reads_data_positions`), so it reads text the way it trained on it.

A run whose shards carried ids (data/token_positions.py: a task document's digit places, TEXT_ID for every text
token) trained with them: abacus then saw row 0 for text, not the token index it uses without ids. Evaluating it
with its default positions would be another model input than training. So, for such a run:

    validation shards   their ids, windowed exactly as the tokens (suites/ppl.py)
    any other text      TEXT_ID for every token (text files, WikiText, PG-19, LAMBADA, retrieval prompts built
                        from filler shards, which never carry ids): what training gave its text tokens

    a mixed task's prompt  its ids exactly as that task's pretraining documents carried them (suites/algorithmic.py):
                        the task's `text_positions` of each example's characters (`task_piece_ids`), TEXT_ID for
                        <|bos|>, separators and a task that defines none; each generated token's by the task's own
                        rule (`task_answer_rule`: `answer_positions` over the generated task symbols)

Every other run (a PE that ignores ids, or data that wrote none) is evaluated with the model's own positions:
no ids are passed at all.
"""

from __future__ import annotations

import torch

from posbench.data.tasks import Example, Task
from posbench.data.tasks.mix import TaskDocument
from posbench.data.token_positions import TEXT_ID, document_positions, writes_positions
from posbench.data.tokenizers import Tokenizer
from posbench.evaluation.generate import AnswerRule
from posbench.pe import PES

OWN = "the model's own"
SHARD_IDS = "the validation shards' per-token position ids, as in training"
TEXT_IDS = (f"TEXT_ID ({TEXT_ID}) for every token: this text carries no position ids, and the run trained with "
            "them (text tokens got TEXT_ID)")
TASK_IDS = (f"each task's own position ids, as its pretraining documents carried them (digit places), TEXT_ID "
            f"({TEXT_ID}) for <|bos|>, separators and tasks without ids")


def trained_with_ids(run_cfg) -> bool:
    """Whether the checkpoint's PE reads data ids and its training shards carried them."""
    return (run_cfg.train.stream == "shards" and PES.get(run_cfg.pe.name).reads_data_positions()
            and writes_positions(run_cfg.data.mix, run_cfg.data.tokenizer))


def text_positions(run_cfg) -> str:
    """What a suite that feeds text without ids says it gave the model (results' `positions`)."""
    return TEXT_IDS if trained_with_ids(run_cfg) else OWN


def text_ids(with_ids: bool, x_BT: torch.Tensor) -> dict:
    """Model kwargs for a batch of plain text `x_BT`: TEXT_ID per token when the run trained with ids
    (`trained_with_ids`, asked once per suite), else none (the model's own positions)."""
    return {"data_pos_BT": torch.full_like(x_BT, TEXT_ID)} if with_ids else {}


def task_piece_ids(tok: Tokenizer, task: Task, ex: Example, text: str) -> list[int]:
    """The ids of `tok.encode(text)`, where `text` is `ex.text` (a demonstration) or its first characters (a query's
    prompt): the ids the tokenize stage wrote beside `ex`'s document (`document_positions`: the task's
    `text_positions` of each character, one token each; TEXT_ID for every token of an example without ids)."""
    if not ex.text.startswith(text):
        raise ValueError(f"task `{task.name}`: {text[:40]!r} is not the start of its example's text")
    pos = task.text_positions(ex)
    doc = TaskDocument(task.name, -1, text, None if pos is None else tuple(pos[:len(text)].tolist()))
    return document_positions(tok, [tok.bos_id, *tok.encode(text)], doc)[1:].tolist()


def task_answer_rule(tok: Tokenizer, task: Task) -> AnswerRule:
    """The ids of generated text tokens by `task`'s own rule, as `text_positions` gives an answer's characters:
    the tokens that are task symbols get `answer_positions` of those symbols in order (a reversed result's digit:
    its place), every other token (the answer's leading space, a byte outside the task's symbols, an id past the
    tokenizer) TEXT_ID; all TEXT_ID for a task without ids."""
    symbols = set(task.vocab.symbols)

    def rule(new: list[int]) -> list[int]:
        chars = [tok.decode([t]) if 0 <= t < tok.vocab_size and t != tok.bos_id else None for t in new]
        at = [k for k, c in enumerate(chars) if c in symbols]
        places = task.answer_positions(task.vocab.ids([chars[k] for k in at]))
        out = [TEXT_ID] * len(new)
        for k, place in zip(at, places or [TEXT_ID] * len(at), strict=True):
            out[k] = place
        return out

    return rule
