"""What a position means in a packed window: `model.packing` and the per-batch document structure.

Training packs documents back to back (`<|bos|> doc <|bos|> doc ...`) into windows of seq_len tokens. Two
independent switches say how a window is read (design rule: position is data):
  mask       causal    every token attends to every earlier token of the window (GPT-2, nanoGPT)
             document  a token attends only to earlier tokens of its own document (OLMo-core's document masking)
  positions  window    position = offset in the window
             document  positions restart at 0 at every document start (torchtitan's per-document RoPE positions)
A document starts at each `bos_id` token; tokens before the first one in a window (a document cut by the window
start) form a document of their own. With mask=document and positions=document a packed window computes what
running each document alone computes (tests/model/test_packing.py holds every PE to it).

Shape legend: B batch, T new tokens, S cached + new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from posbench.config_loader import Checked
from posbench.errors import ConfigError
from posbench.model.masks import causal_mask, window_mask_mod


@dataclass
class PackingConfig(Checked):
    mask: Literal["causal", "document"] = "causal"
    positions: Literal["window", "document"] = "window"
    # the token that starts a document; None: the training data's <|bos|>, filled in when training starts
    # (training/loop.py, from the batch source). It stays None for rows without documents (task rows, random
    # tokens): each row is then one document and both switches change nothing.
    bos_id: int | None = None

    def check(self) -> None:
        if self.bos_id is not None and self.bos_id < 0:
            raise ConfigError(f"model.packing.bos_id must be >= 0, got {self.bos_id}")

    @property
    def is_default(self) -> bool:
        """causal/window: today's packing, the plain causal kernels with no mask tensor."""
        return self.mask == "causal" and self.positions == "window"

    @property
    def active(self) -> bool:
        """Whether windows are split into documents at all (a switch is on and there is a boundary token)."""
        return not self.is_default and self.bos_id is not None


@dataclass
class Documents:
    """One batch's documents, made once per forward and shared by every layer (so FlexAttention's BlockMask is
    built once per batch). `doc_q_BT` / `doc_k_BS`: document index of each query / key (keys include the cache);
    `masked`: whether attention stops at document boundaries (mask=document)."""

    doc_q_BT: torch.Tensor
    doc_k_BS: torch.Tensor
    masked: bool
    # per sliding window (None: full causal), made on first use and shared by every layer with that window
    _allowed: dict = field(default_factory=dict, repr=False)
    _block_mask: dict = field(default_factory=dict, repr=False)

    def allowed(self, window: int | None = None) -> torch.Tensor:
        """(B, 1, T, S) bool, True where attention is allowed: causal (bottom-right aligned), within the last
        `window` keys when given (model/masks.py) and, when masked, within the query's document.
        Made on first use, then shared by every layer."""
        if window not in self._allowed:
            self._allowed[window] = self._make_allowed(window)
        return self._allowed[window]

    def _make_allowed(self, window: int | None) -> torch.Tensor:
        T, S = self.doc_q_BT.shape[1], self.doc_k_BS.shape[1]
        causal_TS = causal_mask(T, S, self.doc_q_BT.device, window)
        if not self.masked:
            return causal_TS[None, None]
        same_BTS = self.doc_q_BT[:, :, None] == self.doc_k_BS[:, None, :]
        return (same_BTS & causal_TS)[:, None]

    def block_mask(self, window: int | None = None, chunk: int | None = None):
        """FlexAttention's BlockMask of `allowed(window)` (and, with `chunk`, model.attention_chunk's rule), from a
        mask_mod over document ids; built on first use."""
        if (window, chunk) not in self._block_mask:
            from torch.nn.attention.flex_attention import create_block_mask

            doc_q, doc_k = self.doc_q_BT, self.doc_k_BS
            B, T, S = doc_q.shape[0], doc_q.shape[1], doc_k.shape[1]
            causal = window_mask_mod(S - T, window, chunk)

            def mask_mod(b, h, q_idx, kv_idx):
                return causal(b, h, q_idx, kv_idx) & (doc_q[b, q_idx] == doc_k[b, kv_idx])

            # compiled on CUDA, so the (B, T, S) mask is never materialised there
            self._block_mask[window, chunk] = create_block_mask(mask_mod, B, None, T, S, device=str(doc_q.device),
                                                                _compile=doc_q.device.type == "cuda")
        return self._block_mask[window, chunk]


@dataclass
class DocumentState:
    """What incremental decoding carries between calls: per row, the document index of the last token and the
    global index where its document started, and the document index of every cached key."""

    last_doc_B: torch.Tensor
    start_B: torch.Tensor
    doc_BS: torch.Tensor


def split_documents(idx_BT: torch.Tensor, bos_id: int, offset: int = 0, state: DocumentState | None = None):
    """(doc_BT, within_BT, state): document index and index within the document of every token; `offset` is the
    global index of the first token (a KV cache's length), `state` what earlier calls saw."""
    B, T = idx_BT.shape
    is_bos = idx_BT == bos_id
    t_T = torch.arange(offset, offset + T, device=idx_BT.device)
    doc_BT = is_bos.long().cumsum(1)
    starts_BT = torch.where(is_bos, t_T, torch.full_like(t_T, -1)).cummax(1).values
    if state is not None:
        doc_BT = doc_BT + state.last_doc_B[:, None]
        starts_BT = torch.maximum(starts_BT, state.start_B[:, None])
    else:
        starts_BT = starts_BT.clamp_min(offset)  # a window cut mid-document: its first tokens start one
    within_BT = t_T - starts_BT
    keys_BS = doc_BT if state is None else torch.cat((state.doc_BS, doc_BT), dim=1)
    return doc_BT, within_BT, DocumentState(doc_BT[:, -1], starts_BT[:, -1], keys_BS)
