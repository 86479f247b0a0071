"""SeqPE's two training objectives (arXiv 2506.13277; ghrua/seqpe, under text_seqpe/src/transformers/:
custom_modules/pe_sampler.py and custom_modules/pe_criterion.py), added to the language-model loss with their weights:
  contrastive   a pivot position's vector against `contrastive_num` candidates, cross-entropy toward the candidate
                nearest to it: p_pivot . p_c as logits (`SeqPeContrastiveCriterion`). Candidates: random positions
                of [0, max_position), merged with, for 60% of pivots, positions of a window of `dist_sample_range`
                ("distributional"), else a quarter of digit-edited copies of the pivot (insert, swap, replace,
                delete a digit: "hard" negatives) farther than the nearest random one
                (`SeqPeContrstiveDataSampler._prepare_batch`, `generate_hard_negatives`);
  distillation  `transfer_num` positions i of the training window and the same offsets from a start s beyond it:
                per head, the softmax over j of p_i . p_j (the trained positions, a fixed target) and of
                p_{s+i} . p_{s+j} are matched by a symmetric KL (`SeqPeTransferCriterion`, metric kl_div,
                beta 1), so relations between positions carry beyond the training length. The authors add it only
                to batches whose positions were not shifted; so does this.
Draws come from a Python RNG seeded from torch's, so a run's seed and its checkpointed RNG state decide them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posbench.errors import ConfigError
from posbench.pe.encoding import PEConfig

HARD_SHARE, DISTRIBUTIONAL_SHARE = 0.25, 0.6  # custom_modules/pe_sampler.py: hard_neg_ratio, 1 - method_ratio


@dataclass
class ObjectiveConfig(PEConfig):
    max_position: int = 20000  # pe_max_position: the shifts' and the objectives' range
    contrastive_weight: float = 0.1  # seqpe_contrastive_weight
    contrastive_batch: int = 16  # seqpe_contrastive_batch_size (per GPU, 4 GPUs)
    contrastive_num: int = 32  # seqpe_contrastive_num
    dist_sample_range: int = 256  # seqpe_dist_sample_range
    transfer_weight: float = 0.1  # seqpe_transfer_weight
    transfer_batch: int = 16  # seqpe_transfer_batch_size
    transfer_num: int = 32  # seqpe_transfer_num

    def check(self) -> None:
        if self.max_position < 2 or self.contrastive_weight < 0 or self.transfer_weight < 0:
            raise ConfigError("pe.max_position must be >= 2 and the objectives' weights >= 0")
        if min(self.contrastive_batch, self.contrastive_num, self.transfer_batch, self.transfer_num) < 1:
            raise ConfigError("pe.contrastive_batch, contrastive_num, transfer_batch and transfer_num must be >= 1")
        if self.contrastive_num + 1 > self.max_position or self.dist_sample_range < 1:
            raise ConfigError("pe.contrastive_num must be below pe.max_position, pe.dist_sample_range >= 1")


def _insert(s, n_max, n_digits, rng):
    if len(s) == n_digits:
        return None
    at = rng.randint(0, len(s))
    r = s[:at] + str(rng.randint(1, 9) if at == 0 else rng.randint(0, 9)) + s[at:]
    return r if int(r) < n_max else None


def _swap(s, n_max, n_digits, rng):
    if len(s) == 1 or (len(s) == 2 and (s[1] == "0" or s[0] == s[1])):
        return None
    for _ in range(11):  # the authors retry ten times for a swap that changes the number and keeps no leading 0
        a, b = sorted(rng.sample(range(len(s)), 2))
        r = s[:a] + s[b] + s[a + 1:b] + s[a] + s[b + 1:]
        if not (a == 0 and s[b] == "0") and r != s:
            return r if int(r) < n_max else None
    return None


def _replace(s, n_max, n_digits, rng):
    while True:
        at, d = rng.randint(0, len(s) - 1), rng.randint(0, 9)
        if not (at == 0 and d == 0) and str(d) != s[at]:
            r = s[:at] + str(d) + s[at + 1:]
            return r if int(r) < n_max else None


def _delete(s, n_max, n_digits, rng):
    if len(s) == 1:
        return None
    at = rng.randint(0, len(s) - 1)
    while at == 0 and s[1] == "0":
        at = rng.randint(1, len(s) - 1)
    return s[:at] + s[at + 1:]


EDITS = (_insert, _swap, _replace, _delete)


def hard_negative(pivot: int, n_max: int, n_digits: int, rng: random.Random) -> int:
    """The pivot after 1 to 3 random digit edits, each leaving a different number below n_max."""
    s, done, goal = str(pivot), 0, rng.randint(1, 3)
    while done < goal:
        r = EDITS[rng.randint(0, 3)](s, n_max, n_digits, rng)
        if r is not None and r != str(pivot):
            s, done = r, done + 1
    return int(s)


def candidates(pivot: int, cfg: ObjectiveConfig, n_digits: int, rng: random.Random) -> list[int]:
    """`contrastive_num` distinct positions other than the pivot (module doc)."""
    n, n_max, n_hard = cfg.contrastive_num, cfg.max_position, int(cfg.contrastive_num * HARD_SHARE)
    simple = rng.sample(range(n_max), n + 1)
    if rng.random() < DISTRIBUTIONAL_SHARE:
        start = int((n_max - cfg.dist_sample_range) * rng.random())
        window = range(max(start, 0), min(start + max(cfg.dist_sample_range, 5 * n), n_max))
        special = list(window) if len(window) <= n else rng.sample(window, n)
    else:
        nearest = min((p - pivot) ** 2 for p in simple[:len(simple) - n_hard])
        special = [h for h in (hard_negative(pivot, n_max, n_digits, rng) for _ in range(n_hard))
                   if (h - pivot) ** 2 > nearest]
    merged = list(dict.fromkeys(p for p in special + simple if p != pivot))
    return merged[:n]


def contrastive_loss(p_piv_BE: torch.Tensor, p_cand_BNE: torch.Tensor, labels_B: torch.Tensor) -> torch.Tensor:
    logits_BN = torch.einsum("be,bne->bn", p_piv_BE, p_cand_BNE)
    return F.cross_entropy(logits_BN, labels_B)


def transfer_loss(p_main_BNE: torch.Tensor, p_far_BNE: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Symmetric KL between the per-head softmaxes of the two Gram matrices; the trained positions' is the target
    (detached). F.kl_div's default mean over every entry, as the authors'."""
    def log_dist(p):
        p_BHNd = p.unflatten(-1, (n_heads, -1)).transpose(1, 2)
        return F.log_softmax(p_BHNd @ p_BHNd.transpose(-1, -2), dim=-1)

    target, far = log_dist(p_main_BNE).detach(), log_dist(p_far_BNE)
    # F.kl_div(input, target, log_target=True) = mean of exp(target) (target - input): both directions
    return (target.exp() * (target - far)).mean() + (far.exp() * (far - target)).mean()


def seqpe_objectives(pe, cfg: ObjectiveConfig, ctx, pos_T: torch.Tensor, vectors_TE: torch.Tensor | None):
    """weight_c * contrastive + weight_t * distillation for one training forward; `vectors_TE`: the forward's own
    position vectors (the distillation's trained positions when the window is 0..T-1, as the authors')."""
    rng = random.Random(int(torch.randint(0, 2 ** 62, ())))
    device, T, total = pos_T.device, ctx.seq_len, torch.zeros((), device=pos_T.device)
    if cfg.contrastive_weight > 0:
        pivots = rng.sample(range(cfg.max_position), cfg.contrastive_batch)
        cands = [candidates(p, cfg, pe.n_digits, rng) for p in pivots]
        labels = torch.tensor([min(range(len(c)), key=lambda i, c=c, p=p: (c[i] - p) ** 2)
                               for p, c in zip(pivots, cands)], device=device)
        p_all = pe.encode(torch.tensor(pivots + [x for c in cands for x in c], device=device))
        p_piv, p_cand = p_all[:len(pivots)], p_all[len(pivots):].unflatten(0, (len(pivots), -1))
        total = total + cfg.contrastive_weight * contrastive_loss(p_piv, p_cand, labels)
    unshifted = pos_T.dim() == 1 and len(pos_T) == T and bool((pos_T == torch.arange(T, device=device)).all())
    if cfg.transfer_weight > 0 and unshifted:
        starts = rng.sample(range(T // 4, cfg.max_position - T), cfg.transfer_batch)
        n = min(cfg.transfer_num, T)  # a window shorter than transfer_num (a task's): all its offsets
        idx = torch.tensor([rng.sample(range(T), n) for _ in starts], device=device)
        main = (vectors_TE if vectors_TE is not None else pe.encode(pos_T))[idx]
        far = pe.encode(idx + torch.tensor(starts, device=device)[:, None])
        total = total + cfg.transfer_weight * transfer_loss(main, far, ctx.n_heads)
    return total
