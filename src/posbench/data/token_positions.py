"""Per-token position ids in the pretraining shards (shards.py version 2): the ids a mixed task defines for its
documents (arithmetic's digit places, `Task.text_positions`), TEXT_ID for every other token.

    task document  <|bos|> 3 2 1 + 5 4 =   8 6 1      (addition, reverse=all, bytes tokenizer: 123 + 45 = 168)
    ids            0       1 2 3 0 1 2 0 0 1 2 3
    text document  <|bos|> T h e   c a t ...
    ids            0       0 0 0 0 0 0 0 ...

TEXT_ID is 0, what a task's own rows give every token that is not a digit (operators, `<end>`; arithmetic.py):
the PEs that read the ids take 0 as "no place". Abacus adds its row 0, which its training offset never shifts
(pe/abacus.py), so text gets no positional signal from it (its NoPE base); position coupling hands 0 to its inner
PE as every text token's position (pe/coupled.py), so text attends without positions (causal NoPE) there too. A
text token's index in its document would be neither: Abacus would shift it as a digit place, and a document
longer than the table (windows cut documents anywhere) would be refused.

When (`writes_positions`): the mix holds a task that defines ids and the tokenizer gives every byte its own token
(`TokenizerKind.one_token_per_byte`: the `bytes` tokenizer), so each single-character task symbol is exactly one
token. The train and val shards then carry ids (val too, so validation reads text as training does); filler
shards never do. The shard directory's mix tag gets `-pos` (mix.mix_tag): shards with ids are other data than the
same mix without them, and a run's data fingerprint names the tag, so a run never resumes onto the other.
A BPE merges digits ("12", " 8" are single tokens), so its shards hold no ids; a PE that reads them refuses such a
run (`positions_refusal`) instead of training on token indices where the task meant places.
"""

from __future__ import annotations

import numpy as np

from posbench.data.tasks.mix import TaskDocument, TaskMixConfig, position_tasks
from posbench.data.tokenizers import Tokenizer, TokenizerKind, get_tokenizer_kind
from posbench.errors import DataError

TEXT_ID = 0  # the id of every token outside a task document's symbols: "no place" (see above)
SPLITS_WITH_POSITIONS = ("train", "val")


def can_carry(tokenizer) -> bool:
    """Whether `tokenizer` (a TokenizerConfig or TokenizerKind) puts each task symbol in a token of its own."""
    kind = tokenizer if isinstance(tokenizer, TokenizerKind) else get_tokenizer_kind(tokenizer.name)
    return kind.one_token_per_byte


def writes_positions(mix: TaskMixConfig, tokenizer) -> bool:
    """Whether the data stage writes position ids for this mix and tokenizer (TokenizerConfig or TokenizerKind)."""
    return bool(position_tasks(mix)) and can_carry(tokenizer)


def positions_refusal(mix: TaskMixConfig, tokenizer, pe_name: str) -> str | None:
    """Why a run whose PE reads the data's ids (`pe_name`) cannot get them from this data, None when it can (or
    when the mix defines none: such a PE then uses its own positions, as on plain text)."""
    tasks = position_tasks(mix)
    if not tasks or can_carry(tokenizer):
        return None
    return (f"pe.name={pe_name} reads the per-token position ids that data.mix task(s) {', '.join(tasks)} define, "
            f"but tokenizer `{tokenizer.name}` can merge several task symbols into one token (a BPE joins digits "
            "such as '12' or ' 8'), so the shards cannot carry them aligned and hold none. Use "
            "data.tokenizer.name=bytes (one token per character), or a PE that does not read data ids (e.g. "
            f"pe.name=rope), or drop {', '.join(tasks)} from data.mix.tasks")


def document_positions(tok: Tokenizer, ids: np.ndarray, doc: TaskDocument | None) -> np.ndarray:
    """The position ids of one document's tokens `ids` (<|bos|> then its text's tokens), int32: TEXT_ID for a
    corpus document (`doc` None) or a task document without ids, else the task's id of each character, which
    must be exactly one token each; anything else is refused rather than written misaligned."""
    out = np.full(len(ids), TEXT_ID, dtype=np.int32)
    if doc is None or doc.positions is None:
        return out
    pieces = [tok.encoding.decode_single_token_bytes(int(t)) for t in ids[1:]]
    if int(ids[0]) != tok.bos_id or pieces != [c.encode("utf-8") for c in doc.text]:
        raise DataError(f"task `{doc.task}` example {doc.example_index} ({doc.text[:40]!r}): tokenizer "
                        f"`{tok.name}` does not give each of its characters one token, so its position ids cannot "
                        "be aligned with the tokens; use data.tokenizer.name=bytes")
    out[1:] = doc.positions
    return out
