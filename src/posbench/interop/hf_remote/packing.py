"""Packed documents in posbench's remote code (torch only), posbench's model.packing: posbench can train on windows
split into documents at a boundary token (`bos_id`): mask=document stops attention at a document's start,
positions=document restarts positions there (posbench/model/packing.py). The fields and values implemented here;
any other is refused, as PE options are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PACKING_VALUES = {"mask": ("causal", "document"), "positions": ("window", "document")}
DOCUMENTS_ATTR = "posbench_documents"  # where a DynamicCache carries the documents of its keys between calls


def check_packing(packing: dict | None) -> dict | None:
    """The packing config if it splits rows into documents (a switch on and a bos_id), None if it does not;
    ValueError for a field or value this file does not implement."""
    if not packing:
        return None
    unknown = set(packing) - set(PACKING_VALUES) - {"bos_id"}
    if unknown:
        raise ValueError(f"packing: field(s) {sorted(unknown)} are not implemented by posbench's remote code")
    for key, values in PACKING_VALUES.items():
        if packing.get(key, values[0]) not in values:
            raise ValueError(f"packing.{key}={packing.get(key)!r} is not implemented (one of {list(values)})")
    bos_id = packing.get("bos_id")
    if bos_id is not None and (not isinstance(bos_id, int) or bos_id < 0):
        raise ValueError(f"packing.bos_id must be a token id >= 0, got {bos_id!r}")
    packing = {key: packing.get(key, values[0]) for key, values in PACKING_VALUES.items()} | {"bos_id": bos_id}
    if bos_id is None or (packing["mask"], packing["positions"]) == ("causal", "window"):
        return None
    return packing


@dataclass
class Documents:
    """One call's documents: each new token's document (doc_q_BT), each key's document and index within it
    (doc_k_BS, within_BS; cached keys first), and what the next call continues from: each row's last document
    (last_doc_B) and the token index where it started (start_B), as posbench's KVCache.documents."""

    doc_q_BT: torch.Tensor
    doc_k_BS: torch.Tensor
    within_BS: torch.Tensor
    last_doc_B: torch.Tensor
    start_B: torch.Tensor


def split_documents(ids_BT, index_BT, keep_BT, bos_id: int, before: Documents | None) -> Documents:
    """The documents of T new tokens at token indices index_BT (keep_BT: real tokens, None = all), continuing
    `before` (the cached keys' documents; None for a sequence's first call). A document starts at each bos_id;
    tokens before the first one form a document of their own, as in posbench. A pad never starts one."""
    is_bos_BT = ids_BT == bos_id
    if keep_BT is not None:
        is_bos_BT = is_bos_BT & keep_BT
    doc_BT = is_bos_BT.long().cumsum(1)
    start_BT = torch.where(is_bos_BT, index_BT, torch.full_like(index_BT, -1)).cummax(1).values
    if before is None:
        start_BT = start_BT.clamp_min(0)
    else:
        doc_BT = doc_BT + before.last_doc_B[:, None]
        start_BT = torch.maximum(start_BT, before.start_B[:, None])
    within_BT = index_BT - start_BT
    doc_k_BS, within_BS = doc_BT, within_BT
    if before is not None:
        doc_k_BS = torch.cat((before.doc_k_BS, doc_BT), dim=1)
        within_BS = torch.cat((before.within_BS, within_BT), dim=1)
    return Documents(doc_BT, doc_k_BS, within_BS, doc_BT[:, -1], start_BT[:, -1])
