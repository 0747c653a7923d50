"""How a sharded run's base weights reach every rank (``marft train --fsdp``): rank 0 loads them
on the host, the other ranks build the model on the meta device, every rank allocates its shards,
and rank 0 broadcasts the weights one tensor at a time (:mod:`marft_algos.trainers.sharding`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from marft_algos.distributed import DistributedContext

__all__ = [
    "load_from_rank0",
    "loaded_empty",
    "materialize",
    "place_whole_parameters",
    "refuse_empty",
]


def refuse_empty(models: Sequence[torch.nn.Module]) -> None:
    """An unsharded run cannot start from a base loaded on the meta device (no weights).

    Raises:
        ValueError: A base model of the policy or the critic has meta-device parameters.
    """
    if any(p.is_meta for model in models for p in model.parameters()):
        raise ValueError(
            "The base model was loaded on the meta device (device='meta'), so it has no weights. "
            "Only ranks other than 0 of a sharded run (--fsdp under torchrun) load it so, and "
            "rank 0's weights fill them; load it with device='cpu' (or a GPU) here."
        )


def loaded_empty(models: Sequence[torch.nn.Module], dist: DistributedContext) -> bool:
    """Whether any rank loaded its base models on the meta device (``load_backbone(device=
    "meta")``: ``marft train --fsdp`` on every rank but 0). A collective.

    Raises:
        ValueError: Rank 0 loaded empty (it is the one whose weights every rank receives), or a
            rank loaded some base models empty and others not.
    """
    meta = [any(p.is_meta for p in m.parameters()) for m in models]
    # Every rank learns of every rank's mistake, so all raise together (none waits alone).
    empty, mixed, on_rank0 = dist.max(
        [float(any(meta)), float(any(meta) and not all(meta)), float(dist.rank == 0 and any(meta))]
    )
    if mixed:
        raise ValueError(
            "Some base models were loaded on the meta device and some were not; under --fsdp a "
            "rank loads all of them whole (rank 0) or all of them empty (the others)."
        )
    if on_rank0:
        raise ValueError(
            "Rank 0 loaded its base model on the meta device: under --fsdp rank 0 loads the "
            "weights (device='cpu') and the other ranks may load empty (device='meta')."
        )
    return empty > 0


def materialize(
    models: Sequence[torch.nn.Module], units: Sequence[Any], device: torch.device
) -> None:
    """Give models built on the meta device uninitialised storage on ``device``, in place.

    Whole parameters keep their ``Parameter`` objects (``swap_tensors``): the optimizers, the
    policy and a tied input/output embedding hold them. FSDP units get their shards from
    ``to_empty``, which FSDP2 handles itself. Models with real weights are left alone.
    """
    done: set[int] = set()
    for model in models:
        for module in model.modules():
            for p in module.parameters(recurse=False):
                if p.is_meta and not hasattr(p, "to_local") and id(p) not in done:
                    done.add(id(p))
                    real = torch.nn.Parameter(
                        torch.empty_like(p, device=device), requires_grad=p.requires_grad
                    )
                    torch.utils.swap_tensors(p, real)
            for name, buffer in module.named_buffers(recurse=False):
                if buffer.is_meta:
                    module._buffers[name] = torch.empty_like(buffer, device=device)
    for unit in units:
        if any(p.is_meta for p in unit.parameters()):
            unit.to_empty(device=device)


def load_from_rank0(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Fill every rank's parameters and buffers with rank 0's, one tensor at a time.

    ``weights`` is rank 0's ``state_dict()`` from before sharding (``{}`` elsewhere; rank 0's
    own parameters and shards already hold these values). A whole parameter or buffer is
    broadcast into place; a sharded one is broadcast whole into a temporary tensor and each rank
    keeps its slice (``distribute_tensor`` without communication), so a rank never holds more
    than one full parameter beyond its own storage. Buffers outside the state dict (rotary
    frequencies, which a meta-device build leaves empty) are broadcast too.
    """
    from torch import distributed as torch_dist
    from torch.distributed.tensor import DTensor, distribute_tensor

    names = {id(t): n for n, t in model.state_dict(keep_vars=True).items()}
    with torch.no_grad():
        for p in model.parameters():
            if not isinstance(p, DTensor):
                torch_dist.broadcast(p.data, src=0)
                continue
            where = p.device_mesh.device_type
            if torch_dist.get_rank() == 0:
                full = weights[names[id(p)]].to(where)
            else:
                full = torch.empty(p.shape, dtype=p.dtype, device=where)
            torch_dist.broadcast(full, src=0)
            mine = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
            p.to_local().copy_(mine.to_local())
            del full, mine
        for buffer in model.buffers():
            torch_dist.broadcast(buffer, src=0)


def place_whole_parameters(model: torch.nn.Module, device: torch.device) -> None:
    """Move the parameters FSDP left whole (adapters) and any buffer outside its units to
    ``device``, in place (the same ``Parameter`` objects: optimizers built later see them)."""
    with torch.no_grad():
        for p in model.parameters():
            if not hasattr(p, "to_local") and p.device != device:
                p.data = p.data.to(device)
        for module in model.modules():
            for name, buffer in module.named_buffers(recurse=False):
                if buffer.device != device:
                    module._buffers[name] = buffer.to(device)
