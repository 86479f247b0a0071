"""What each speed-only path of the sdpa_bias kernel costs one call: the price `attention_plan.plan_bias_call`
compares to take the cheapest of the paths that apply (one block, the far field, blocked SDPA).

Unit: one score entry, a query against a key for one head of one batch row, as SDPA with a float mask handles it.
A path's price is the entries its SDPA calls are handed, plus CALL_ENTRIES per call for the torch calls around it:

  one block   every (query, key) pair of the call, the causal future included (H x T x S), in one call
  blocked     per block of `bias_attention.block_rows` queries, the keys up to its last query; a call per block
  far field   per chunk of `far_field.CHUNK_ROWS` queries, the keys up to its last query: the near band's under a
              mask, the far keys before it without one at FAR_ENTRY of the price (no bias to build, no mask to
              read); one call per chunk, two when it has far keys

Why this model: time follows those entries, about 2 ns each, masked or not. ALiBi on the nano model (4 heads of
16, batch 8, one thread, thread CPU time, best of 5; a shared 2-core AMD EPYC), ms per call:

  | T     | one block | far field | blocked |
  | 256   | 4.05      | 4.34      | 3.64    |
  | 384   | 8.79      | 7.73      | 7.62    |
  | 512   | 16.01     | 11.66     | 14.14   |
  | 1,024 | -         | 36.79     | 34.75   |
  | 4,096 | -         | 483.7     | 515.3   |

At 512 tokens the one-block path hands SDPA 1.05M entries per batch row where the far field hands it 0.79M
(its second chunk skips the causal future), which the plan's old rule (one block whenever the bias fits in
BLOCK_ELEMENTS) missed. Where the prices tie, the earlier rule of BIAS_PATHS runs, as before pricing.
"""

from __future__ import annotations

import math

from posbench.model import bias_attention, far_field

CALL_ENTRIES = 1 << 14  # ~30 us of Python-level torch calls per SDPA call, in ~2 ns entries
FAR_ENTRY = 0.9  # a far-field key without a mask, against one under a mask (fitted to the 1,024-4,096 rows above)


def one_block(H: int, T: int, S: int) -> float:
    return H * T * S + CALL_ENTRIES


def blocked(H: int, T: int, S: int) -> float:
    rows = bias_attention.block_rows(T, S, H)
    entries = sum((min(T, q0 + rows) - q0) * (S - T + min(T, q0 + rows)) for q0 in range(0, T, rows))
    return H * entries + CALL_ENTRIES * math.ceil(T / rows)


def far(H: int, T: int, S: int, start: int) -> float:
    """The far field with its affine part from distance `start` (FarField.start): model/far_field.py's chunks."""
    rows, band = min(T, far_field.CHUNK_ROWS), max(start - 1, 0)
    price = 0.0
    for q0 in range(0, T, rows):
        R, p0 = min(T, q0 + rows) - q0, S - T + q0
        far_keys = max(p0 - band, 0)
        price += H * R * (min(p0, band) + R + FAR_ENTRY * far_keys) + CALL_ENTRIES * (1 + (far_keys > 0))
    return price
