"""The positions of one forward call in posbench's remote code (torch and the modules beside this file): which slots
are real tokens, each slot's token index and the PE's position of it, and the documents of packed rows.

Positions are token indices, as in training: 0..S-1, or in a left-padded batch (attention_mask 0 on pads)
each row's count of real tokens before it, which is what transformers' own models (Llama, Qwen3) and
`generate` derive from the mask. A cached key's position is therefore recomputed on every call instead of
being stored. In a left-padded batch each row's positions are computed from its real tokens alone
(padded_rows.py).

Packed documents (config.packing, posbench's model.packing): a row is split into documents at `bos_id` (a pad is
never a boundary; tokens before the first one are a document of their own); positions=document restarts token
indices there (mask=document is applied with the other masks, modeling_posbench.py). The documents of cached keys
ride on the DynamicCache (DOCUMENTS_ATTR), as posbench's KVCache.documents, so cached decoding continues the current
one.
"""

from __future__ import annotations

import torch

from .packing import DOCUMENTS_ATTR, Documents, split_documents
from .padded_rows import rows_positions


class TokenPositions:
    """A mixin of PosbenchForCausalLM, whose `pe`, `packing`, `whole_sequence` and `config` it reads."""

    def key_positions(self, keep_BS, docs, S: int, device) -> torch.Tensor:
        """The PE's positions of every slot, cached and new, as posbench's model asks them (design rule: position
        is data): (S,) shared by the batch; per row (B, S) in a left-padded batch (each row's real tokens as a
        sequence of their own) or with positions restarting at each document (`document_positions`)."""
        if docs is not None and self.packing["positions"] == "document":
            return self.pe.document_positions(docs.within_BS, docs.doc_k_BS)
        if keep_BS is not None:
            return rows_positions(self.pe, keep_BS)
        return self.pe.positions(S, device, 0)

    def token_indices(self, attention_mask, position_ids, B: int, offset: int, T: int, device, input_ids=None,
                      cache=None):
        """(index_BS, keep_BS, docs): each slot's token index (what the PE sees as its position; with document
        positions its index within its document) and which slots are real tokens (None: all of them). Padded rows
        count only their real tokens, as transformers does. docs: the documents (packing) or None."""
        S, keep_BS = offset + T, None
        if attention_mask is not None:
            if attention_mask.ndim != 2 or tuple(attention_mask.shape) != (B, S):
                raise ValueError(f"attention_mask must be 2D (batch, cached + new tokens) = ({B}, {S}), got shape "
                                 f"{tuple(attention_mask.shape)}")
            if not bool(attention_mask.bool().all()):
                keep_BS = attention_mask.bool()
        if keep_BS is None:
            index_BS = torch.arange(S, device=device)[None]
        else:
            if self.whole_sequence:
                raise ValueError(f"PE `{self.config.pe['name']}` cannot take a padded batch: its positions are "
                                 "drawn for a whole sequence (randomized); pass unpadded sequences of equal length")
            index_BS = (keep_BS.long().cumsum(-1) - 1).clamp_min(0)
        docs = self.documents(input_ids, index_BS, keep_BS, offset, cache) if self.packing else None
        accepted = [index_BS[:, offset:]]  # what generate passes
        if docs is not None and self.packing["positions"] == "document":
            index_BS = docs.within_BS
            accepted.append(index_BS[:, offset:])  # the model's own positions, given back
        if position_ids is not None:
            real_BT = keep_BS[:, offset:] if keep_BS is not None else torch.ones_like(accepted[0], dtype=torch.bool)
            if position_ids.ndim != 2 or position_ids.shape[-1] != T or \
                    all(bool(((position_ids.to(device) != want_BT) & real_BT).any()) for want_BT in accepted):
                # cached keys' positions are not stored but recomputed from the mask: other positions cannot be
                # honoured, and the model was trained on token indices only
                raise ValueError("position_ids must be the token indices implied by attention_mask (what generate "
                                 "passes)" + (", or each token's index within its document (packing.positions="
                                              "document; the model restarts positions at each bos_id itself)"
                                              if len(accepted) > 1 else "")
                                 + "; modeling_posbench.py has no other positions")
        return index_BS, keep_BS, docs

    def documents(self, input_ids, index_BS, keep_BS, offset: int, cache) -> Documents:
        """This call's documents (split_documents), continuing those the cache carries, which then carries
        these: cached keys keep the document and position they were written with."""
        before = None
        if offset:
            before = getattr(cache, DOCUMENTS_ATTR, None)
            if before is None or before.doc_k_BS.shape != (input_ids.shape[0], offset):
                raise ValueError("this cache's keys carry no document boundaries of this model's (a cache filled "
                                 "elsewhere, cropped or reordered, as beam search and assisted decoding do); "
                                 "decode greedily or by sampling with the cache this model returns, or without one")
        keep_BT = keep_BS[:, offset:] if keep_BS is not None else None
        docs = split_documents(input_ids, index_BS[:, offset:], keep_BT, self.packing["bos_id"], before)
        if cache is not None:
            setattr(cache, DOCUMENTS_ATTR, docs)
        return docs
