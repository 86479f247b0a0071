"""Trying a checkpoint: greedy continuation of one prompt and the attention of the generated tokens.

Shape legend: L layers, H heads, N new tokens, K keys (prompt + generated tokens but the last).
"""

from __future__ import annotations

import numpy as np
import torch

from posbench.data.tasks.task import Task
from posbench.errors import ConfigError
from posbench.evaluation.generate import greedy_generate
from posbench.evaluation.task_accuracy import attention_probs
from posbench.targets import IGNORE


def continue_ids(model, prompt: list[int], n_new: int) -> list[int] | None:
    """The greedy continuation, or None when the PE cannot represent that many positions (n/a)."""
    return greedy_generate(model, [prompt], [n_new], "cpu")[0]


def generated_attention(model, prompt: list[int], new: list[int]) -> list:
    """[layer][head][n][key]: the attention of the query that produced each generated token (the last
    prompt token for the first, then each generated token for the next) over everything before it."""
    ids = prompt + new[:-1]  # the last generated token is never read by the model
    probs = attention_probs(model, torch.tensor([ids], dtype=torch.long))
    first = len(prompt) - 1
    return [[head[first:] for head in layer] for layer in probs]


def task_prompt(task: Task, seed: int, index: int, split: str) -> tuple[list[int], list[int]]:
    """(prompt ids, expected ids) of one task example: the prompt runs up to the first position with a
    target, the expected continuation is the targets from there (the answer of answer-style tasks)."""
    ex = task.example(seed, index, split)
    asked = np.flatnonzero(ex.targets_T != IGNORE)
    if asked.size == 0:
        raise ConfigError(f"example {index} of task `{task.name}` ({split}) asks nothing")  # the user's pick
    first = int(asked[0])
    return ex.tokens_T[: first + 1].tolist(), [int(t) for t in ex.targets_T[asked]]


def scored_tokens(expected: list[int], decode_one) -> list[bool]:
    """Which expected tokens a task scores: in the text form (a mix's tasks) the spaces between answer symbols
    are separators, not answer tokens, so a continuation of spaces does not count as partly right."""
    return [bool(decode_one([t]).strip()) for t in expected]


def tokens_right(new: list[int], expected: list[int], scored: list[bool]) -> tuple[int, int]:
    """(right, counted): greedy tokens equal to the expected ones, position by position, over the scored ones."""
    hits = [a == b for a, b in zip(new, expected)] + [False] * max(0, len(expected) - len(new))
    return sum(h for h, s in zip(hits, scored) if s), sum(scored)
