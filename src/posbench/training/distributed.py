"""Everything that knows about ranks. Works unchanged in one process (world size 1, no process
group) and under torchrun (NCCL on CUDA, gloo on CPU)."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as td
from torch import nn


def is_distributed() -> bool:
    return td.is_available() and td.is_initialized()


def rank() -> int:
    return td.get_rank() if is_distributed() else 0


def world_size() -> int:
    return td.get_world_size() if is_distributed() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if is_distributed():
        td.barrier()


def init(device_type: str) -> torch.device:
    """Join the torchrun process group when launched by torchrun; pick this rank's device."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and not is_distributed():
        backend = "nccl" if device_type == "cuda" else "gloo"
        td.init_process_group(backend, timeout=datetime.timedelta(minutes=10))
    if device_type == "cuda":
        torch.cuda.set_device(local_rank())
        return torch.device("cuda", local_rank())
    return torch.device("cpu")


def shutdown() -> None:
    if is_distributed():
        td.destroy_process_group()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    if is_distributed():
        td.all_reduce(t, op=td.ReduceOp.SUM)
    return t


def all_reduce_max(t: torch.Tensor) -> torch.Tensor:
    if is_distributed():
        td.all_reduce(t, op=td.ReduceOp.MAX)
    return t


def any_rank(flag: bool, device) -> bool:
    """True on every rank if it is True on any rank (signals, non-finite checks)."""
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    return bool(all_reduce_max(t).item() > 0)


def step_check(loss: torch.Tensor, grad_norm: torch.Tensor, stop: bool) -> tuple[int, int, bool]:
    """The per-step control read, fused into one tensor, one all-reduce (MIN) and one device->host
    transfer: (first rank with a non-finite loss or -1, first rank with a non-finite grad norm or -1,
    whether any rank was asked to stop). The loop's only host sync on a step that does not log."""
    me, inf = float(rank()), float("inf")
    t = torch.stack((torch.where(torch.isfinite(loss.float()), inf, me),
                     torch.where(torch.isfinite(grad_norm.float()), inf, me),
                     torch.full((), -1.0 if stop else 0.0, device=loss.device)))
    if is_distributed():
        td.all_reduce(t, op=td.ReduceOp.MIN)
    bad_loss, bad_grad, stop_min = t.tolist()
    return (-1 if bad_loss == inf else int(bad_loss), -1 if bad_grad == inf else int(bad_grad), stop_min < 0)


def wrap_model(model: nn.Module, parallel: str, device: torch.device, unused_params: bool = False) -> nn.Module:
    """DDP or FSDP2 around the plain model. Single process: the model itself. `unused_params`: some parameters may
    be outside the forward (RePo's networks before pe.rope_until), which DDP must look for after each backward."""
    if not is_distributed():
        return model
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:  # shard per block, then the root (embeddings, head)
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
               find_unused_parameters=unused_params)


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") else model


def full_state(model: nn.Module, optimizer) -> tuple[dict, dict]:
    """Full (unsharded) model and optimizer state dicts keyed by parameter name, on CPU."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(unwrap(model) if not is_fsdp(model) else model, optimizer, options=opts)


def load_full_state(model: nn.Module, optimizer, model_state: dict, optim_state: dict | None) -> None:
    from torch.distributed.checkpoint import state_dict as dcp

    target = unwrap(model) if not is_fsdp(model) else model
    dcp.set_model_state_dict(target, model_state, options=dcp.StateDictOptions(full_state_dict=True))
    if optim_state is not None:
        # not strict: a parameter that has had no gradient yet has no AdamW state to save (RePo's networks before
        # pe.rope_until). torch makes every state with a zero-gradient step first; such a parameter's is removed
        # again, so AdamW starts it at its first gradient (step 1), as in the run that was not interrupted
        dcp.set_optimizer_state_dict(target, optimizer, optim_state,
                                     options=dcp.StateDictOptions(full_state_dict=True, strict=False))
        saved = optim_state.get("state", {})
        for name, param in target.named_parameters():
            if name not in saved:
                optimizer.state.pop(param, None)


def is_fsdp(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def collective_device() -> torch.device:
    """Where small control tensors live: NCCL only reduces CUDA tensors, gloo CPU ones."""
    if is_distributed() and td.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_object(obj):
    """Rank 0's `obj` on every rank (decisions that must not diverge, e.g. which checkpoint to resume)."""
    box = [obj]
    if is_distributed():
        td.broadcast_object_list(box, src=0)
    return box[0]
