"""The LM head and its cross-entropy, optionally fused and chunked so the (B, T, V) logits never exist.

Shape legend: B batch, T tokens, N = B * T tokens flattened, C tokens per chunk, D model dim, V vocab.

`head_loss(h_BTD, weight_VD, targets_BT, chunk_tokens)` -> ModelOutput (model/output.py):
  chunk_tokens == 0  the plain path: logits = h @ W^T (B, T, V), then F.cross_entropy on their float32
                     view; returns the loss and the logits.
  chunk_tokens > 0   fused linear + cross-entropy over chunks of C tokens (the "fused linear
                     cross-entropy" of Liger-Kernel, Hsu et al. 2024, and of Wijmans et al. 2024 "Cut
                     your losses"): each chunk's float32 logits (C, V) are made, reduced to the loss,
                     turned at once into their gradient softmax - onehot, and multiplied back into
                     dL/dh (C, D) and dL/dW (V, D); then they are freed. Backward only scales those two
                     by the incoming gradient, so no logits are recomputed and the FLOPs equal the
                     plain path's. Peak extra memory: one (C, V) float32 block plus dL/dh and dL/dW
                     (the size of h and of W), instead of several (N, V) tensors (logits, their float32
                     copy, log-softmax, its gradient). Returns the loss and, when asked (stats=True),
                     the logit moments: a detached float32 (6,) tensor [max |z|, sum z, sum z^2, count, sum of the rows'
                     entropies, rows] of the logits z, which `training.metrics.logit_stats` and
                     `output_entropy` turn into the numbers they report for full logits. Without
                     autograd (evaluation) the chunks compute only the loss.

Both paths: mean over targets != -100 (NaN when there are none, as F.cross_entropy), matmuls in the
autocast dtype when autocast is on (as nn.Linear would), reductions in float32. `auto_chunk_tokens(V)`
is the default: fused for V >= 32768, where the logits dominate activation memory (docs/performance.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posbench.model.output import ModelOutput
from posbench.targets import IGNORE

FUSED_MIN_VOCAB = 32768  # model.vocab_size from which the fused loss is the default
DEFAULT_CHUNK_TOKENS = 512  # (C, V) fp32 block: 512 x 65536 x 4 B = 128 MiB at the presets' V


def auto_chunk_tokens(vocab_size: int, mode: str = "auto", chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> int:
    """train.loss (auto | chunked | full) -> tokens per chunk, 0 for the plain path."""
    if mode == "full" or (mode == "auto" and vocab_size < FUSED_MIN_VOCAB):
        return 0
    return chunk_tokens


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    dev = t.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else t.dtype


def _chunk_terms(z_CV, y_C, softmax: bool, stats: bool = True):
    """Fresh float32 logits of one chunk -> (summed loss, moments (6,), valid mask), overwriting z_CV by
    exp(z - max) (by softmax(z) with softmax=True). Every step is a reduction or in place, so a chunk
    never needs a second (C, V) buffer (torch.logsumexp, abs() or square() would allocate one); only the
    entropy of a stats (log) step takes one transient block."""
    valid_C = y_C != IGNORE
    moments = torch.stack((torch.maximum(z_CV.amax(), -z_CV.amin()), z_CV.sum(),
                           torch.dot(z_CV.view(-1), z_CV.view(-1)),
                           torch.full((), float(z_CV.numel()), device=z_CV.device))) if stats else None
    z_true_C = z_CV.gather(1, y_C.clamp(min=0)[:, None]).squeeze(1)
    max_C = z_CV.amax(dim=-1, keepdim=True)
    e_CV = z_CV.sub_(max_C).exp_()
    sum_C = e_CV.sum(dim=-1, keepdim=True)
    lse_C = (max_C + sum_C.log()).squeeze(1)
    loss = torch.where(valid_C, lse_C - z_true_C, 0.0).sum()
    if softmax:
        e_CV.div_(sum_C)
    if stats:  # entropy of each row's next-token distribution, -sum p log p
        p_CV = e_CV if softmax else e_CV / sum_C
        entropy = torch.special.entr(p_CV).sum()
        moments = torch.cat((moments, torch.stack((entropy, torch.full((), float(z_CV.shape[0]),
                                                                       device=z_CV.device)))))
    return loss, moments, valid_C


def _merge(acc, moments):
    """Moments of two chunks as one: the max of max |z|, the sum of every other entry."""
    return torch.cat((torch.maximum(acc[:1], moments[:1]), acc[1:] + moments[1:]))


class FusedLinearCrossEntropy(torch.autograd.Function):
    """loss = mean CE(h @ W^T, y); gradients made chunk by chunk in forward (see the module docstring)."""

    @staticmethod
    def forward(ctx, h_ND, w_VD, y_N, chunk: int, dtype: torch.dtype, stats: bool):
        w_c = w_VD.to(dtype)
        grad_h = torch.empty_like(h_ND)
        grad_w = torch.zeros(w_VD.shape, dtype=torch.float32, device=w_VD.device)
        loss = h_ND.new_zeros((), dtype=torch.float32)
        moments = h_ND.new_zeros(6, dtype=torch.float32)
        for s in range(0, h_ND.shape[0], chunk):
            h_c = h_ND[s:s + chunk].to(dtype)
            z_CV = (h_c @ w_c.t()).float()
            loss_c, mom_c, valid_C = _chunk_terms(z_CV, y_N[s:s + chunk], softmax=True, stats=stats)
            loss, moments = loss + loss_c, _merge(moments, mom_c) if stats else moments
            # d(sum of chunk losses)/dz = softmax(z) - onehot(y) on valid rows, 0 on ignored ones
            g_CV = z_CV.scatter_add_(1, y_N[s:s + chunk].clamp(min=0)[:, None], -valid_C.float()[:, None])
            g_CV.mul_(valid_C.float()[:, None])
            g_c = g_CV.to(dtype)
            grad_h[s:s + chunk] = g_c @ w_c
            if dtype == torch.float32:
                grad_w.addmm_(g_c.t(), h_c)  # no (V, D) temporary
            else:
                grad_w += (g_c.t() @ h_c).float()
        n_valid = (y_N != IGNORE).sum().float()
        ctx.save_for_backward(grad_h, grad_w, n_valid)
        ctx.w_dtype = w_VD.dtype
        ctx.mark_non_differentiable(moments)
        return loss / n_valid, moments

    @staticmethod
    def backward(ctx, grad_loss, grad_moments):
        grad_h, grad_w, n_valid = ctx.saved_tensors
        scale = grad_loss / n_valid
        return grad_h * scale, (grad_w * scale).to(ctx.w_dtype), None, None, None, None


def _chunked_loss_no_grad(h_ND, w_VD, y_N, chunk: int, dtype: torch.dtype, stats: bool):
    w_c = w_VD.to(dtype)
    loss = h_ND.new_zeros((), dtype=torch.float32)
    moments = h_ND.new_zeros(6, dtype=torch.float32)
    for s in range(0, h_ND.shape[0], chunk):
        z_CV = (h_ND[s:s + chunk].to(dtype) @ w_c.t()).float()
        loss_c, mom_c, _ = _chunk_terms(z_CV, y_N[s:s + chunk], softmax=False, stats=stats)
        loss, moments = loss + loss_c, _merge(moments, mom_c) if stats else moments
    return loss / (y_N != IGNORE).sum().float(), moments


def head_loss(h_BTD, weight_VD, targets_BT, chunk_tokens: int, lm_head=None, stats: bool = False) -> ModelOutput:
    """The mean loss with the logits (plain path) or, with stats=True, the logit moments (fused path); see the
    module docstring. stats=False skips the moments (three reductions per chunk, ~2% of a CPU step). `lm_head`
    (the nn.Linear holding weight_VD) is called on the plain path, so hooks and autocast behave exactly as
    before."""
    if chunk_tokens <= 0:
        logits_BTV = lm_head(h_BTD) if lm_head is not None else h_BTD @ weight_VD.t()
        return ModelOutput(loss=cross_entropy(logits_BTV, targets_BT), logits=logits_BTV)
    h_ND, y_N, dtype = h_BTD.flatten(0, 1), targets_BT.flatten(), _compute_dtype(h_BTD)
    with torch.autocast(h_BTD.device.type, enabled=False):
        if torch.is_grad_enabled() and (h_ND.requires_grad or weight_VD.requires_grad):
            loss, moments = FusedLinearCrossEntropy.apply(h_ND, weight_VD, y_N, chunk_tokens, dtype, stats)
        else:
            loss, moments = _chunked_loss_no_grad(h_ND, weight_VD, y_N, chunk_tokens, dtype, stats)
    return ModelOutput(loss=loss, logit_moments=moments.detach() if stats else None)


def cross_entropy(logits_BTV, targets_BT):
    """The plain path's loss: mean cross-entropy of the float32 logits over targets != -100 (every
    architecture's full-logits loss)."""
    return F.cross_entropy(logits_BTV.float().flatten(0, 1), targets_BT.flatten(), ignore_index=IGNORE)
