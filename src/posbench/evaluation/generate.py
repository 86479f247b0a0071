"""Greedy decoding with the KV cache, batched over prompts of equal length.

Shape legend: B batch, T prompt tokens, N new tokens, V vocabulary.

The model is any module with `new_cache()`, `positions(T, device, offset)` and
`forward(idx_BT, cache=...) -> ModelOutput` (its `.logits`, B x T x V): any architecture, or a scripted stand-in
in tests. The cache
holds rotated keys and key positions (model/attention.py), so decoding one token at a time gives the
same logits as re-running the whole sequence, for every PE family.

Batching: the Transformer has no padding mask, so a padded row would attend to its pads. Prompts are
grouped by exact (prompt length, answer length) instead: only such prompts share a batch (tasks whose
prompt length is set by their size parameter batch well, filler prompts of varying length less so),
and every row of a batch needs exactly the same positions, so n/a is decided per row, not per batch.

A prompt whose positions a PE cannot represent (a learned table shorter than prompt + answer) gives
None: the caller reports "n/a". Decoding never clamps or wraps positions.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable
from typing import NamedTuple

import torch

from posbench.data.token_positions import TEXT_ID
from posbench.data.tokenizers import Tokenizer
from posbench.evaluation.evaluator import NullProgress, Progress
from posbench.pe import PositionRangeError


def supports_cache(model) -> bool:
    """False for PEs that define positions only for a whole sequence (randomized positions drawn at
    evaluation time): they are decoded by re-running the sequence, which is what the PE means."""
    try:
        model.positions(1, "cpu", offset=1)
    except PositionRangeError:
        return True  # a table too short even for two positions: decoding reports n/a anyway
    except ValueError:
        return False
    return True


AnswerRule = Callable[[list[int]], list[int]]  # generated tokens so far -> their position ids


class PromptIds(NamedTuple):
    """One prompt's position ids for `greedy_generate`: one per prompt token, and the rule giving its generated
    tokens theirs (e.g. a task's `answer_positions` read through the text tokenizer: evaluation/data_ids.py)."""

    prompt: list[int]
    answer_rule: AnswerRule


class DataPositions:
    """The position ids a task defines (`Example.positions_T`) while decoding: the prompt's, then each generated
    token's by the task's rule (`Task.answer_positions`: an answer token's id from the answer tokens up to it, e.g.
    a reversed answer digit's place = its index among the answer digits + 1). The model's `data_pos_BT`.
    `answer_rule`: one rule for every row, or a list with each row's own (a batch mixing prompts of several
    tasks)."""

    def __init__(self, prompt_BT: torch.Tensor, answer_rule: AnswerRule | list[AnswerRule]):
        self.prompt_BT = prompt_BT
        self.rules = list(answer_rule) if isinstance(answer_rule, list) else [answer_rule] * prompt_BT.shape[0]
        if len(self.rules) != prompt_BT.shape[0]:
            raise ValueError(f"{len(self.rules)} answer rules for {prompt_BT.shape[0]} prompt rows")

    def answer_BN(self, new_BN: torch.Tensor) -> torch.Tensor:
        """(B, N) ids of the generated tokens so far, row by row through its rule."""
        rows = [rule(row) for rule, row in zip(self.rules, new_BN.tolist(), strict=True)]
        return torch.tensor(rows, dtype=torch.long, device=self.prompt_BT.device).reshape(new_BN.shape)

    def prompt(self) -> dict:
        return {"data_pos_BT": self.prompt_BT}

    def last(self, new_BN: torch.Tensor) -> dict:
        """Kwargs for feeding the last generated token through the cache."""
        return {"data_pos_BT": self.answer_BN(new_BN)[:, -1:]}

    def whole(self, new_BN: torch.Tensor) -> dict:
        """Kwargs for re-running prompt + generated tokens."""
        return {"data_pos_BT": torch.cat((self.prompt_BT, self.answer_BN(new_BN)), dim=1)}


class NoDataPositions:
    """The data defines no position ids: the model is called as it always was (every architecture, stand-ins)."""

    def prompt(self) -> dict:
        return {}

    def last(self, new_BN) -> dict:
        return {}

    def whole(self, new_BN) -> dict:
        return {}


@torch.no_grad()
def greedy_cached(model, prompt_BT: torch.Tensor, n_new: int, scores: list | None = None,
                  positions: DataPositions | None = None) -> torch.Tensor:
    """(B, N) greedy tokens: the prompt once through the cache, then one token per call. `scores`, when given,
    gets each step's float32 logits (B, V) appended (the export check compares them with transformers').
    `positions`: the task's own position ids, fed with every call."""
    positions = positions or NoDataPositions()
    cache = model.new_cache()
    logits_BTV = model(prompt_BT, cache=cache, **positions.prompt()).logits
    out = []
    for i in range(n_new):
        step_BV = logits_BTV[:, -1].float()
        if scores is not None:
            scores.append(step_BV)
        next_B = step_BV.argmax(-1)
        out.append(next_B)
        if i + 1 < n_new:  # the last token is never fed back: it needs no position
            logits_BTV = model(next_B[:, None], cache=cache, **positions.last(torch.stack(out, dim=1))).logits
    return torch.stack(out, dim=1)


@torch.no_grad()
def greedy_recompute(model, prompt_BT: torch.Tensor, n_new: int, scores: list | None = None,
                     positions: DataPositions | None = None) -> torch.Tensor:
    """(B, N) greedy tokens by re-running the whole sequence each step (no cache); `scores` and `positions` as
    greedy_cached."""
    positions = positions or NoDataPositions()
    seq_BT = prompt_BT
    out = []
    for _ in range(n_new):
        new_BN = torch.stack(out, dim=1) if out else prompt_BT[:, :0]
        step_BV = model(seq_BT, **positions.whole(new_BN)).logits[:, -1].float()
        if scores is not None:
            scores.append(step_BV)
        next_B = step_BV.argmax(-1)
        out.append(next_B)
        seq_BT = torch.cat((seq_BT, next_B[:, None]), dim=1)
    return torch.stack(out, dim=1)


def greedy_generate(model, prompts: list[list[int]], n_new: list[int], device, batch_size: int = 8,
                    autocast=contextlib.nullcontext, progress: Progress | None = None,
                    text_ids: bool = False, data_ids: list[PromptIds] | None = None) -> list[list[int] | None]:
    """For each prompt, its first n_new[i] greedy tokens, or None where the PE cannot represent
    len(prompt) + n_new[i] - 1 positions. `text_ids`: every token, prompt and generated, is fed as text with the
    data id TEXT_ID (a run that trained with the data's ids: evaluation/data_ids.py). `data_ids`: each prompt's own
    ids and rule for its generated tokens' (a task's places in a mixed run's prompt). Neither: the model's own
    positions, no ids passed."""
    if len(prompts) != len(n_new):
        raise ValueError(f"{len(prompts)} prompts but {len(n_new)} answer lengths")
    if any(len(p) == 0 for p in prompts) or any(n < 1 for n in n_new):
        raise ValueError("every prompt needs at least one token and every answer at least one new token")
    if text_ids and data_ids is not None:
        raise ValueError("greedy_generate takes text_ids or data_ids, not both")
    if text_ids:
        data_ids = [PromptIds([TEXT_ID] * len(p), all_text) for p in prompts]
    if data_ids is not None and [len(d.prompt) for d in data_ids] != [len(p) for p in prompts]:
        raise ValueError("data_ids needs one id per prompt token, for every prompt")
    progress = progress or NullProgress()
    decode = greedy_cached if supports_cache(model) else greedy_recompute
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        groups[(len(p), n_new[i])].append(i)
    out: list[list[int] | None] = [None] * len(prompts)
    for (_, n), rows in sorted(groups.items()):
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            prompt_BT = torch.tensor([prompts[i] for i in chunk], dtype=torch.long, device=device)
            try:
                with autocast():
                    ids = None if data_ids is None else DataPositions(
                        torch.tensor([data_ids[i].prompt for i in chunk], dtype=torch.long, device=device),
                        [data_ids[i].answer_rule for i in chunk])
                    new_BN = decode(model, prompt_BT, n, positions=ids).tolist()
            except PositionRangeError:
                new_BN = [None] * len(chunk)
            for i, new in zip(chunk, new_BN, strict=True):
                out[i] = new
            progress.update(len(chunk))
    return out


def all_text(new: list[int]) -> list[int]:
    """The answer rule of text: TEXT_ID for every generated token."""
    return [TEXT_ID] * len(new)


def decode(tokenizer: Tokenizer, ids: list[int]) -> str:
    """Text of generated ids. A model's vocabulary is often larger than its tokenizer's (rounded up, or
    the 512-id nano model on 257 byte tokens): ids the tokenizer does not have read as U+FFFD, so such
    an answer is simply wrong instead of crashing the evaluation."""
    out, run = [], []
    for i in ids:
        if 0 <= i < tokenizer.vocab_size:
            run.append(i)
            continue
        out += [tokenizer.decode(run), "\ufffd"]
        run = []
    return "".join(out) + tokenizer.decode(run)
