"""Sharded training: the frozen base models split over the processes with torch's FSDP2.

``marft train --fsdp`` (``TrainerConfig.fsdp``) keeps each rank's copy of the base model(s) to
about ``1/N`` of their weights: every decoder layer is a ``torch.distributed.fsdp.fully_shard``
unit over one device mesh (or a 2D mesh with
``fsdp_replicas`` > 1: hybrid sharding, shards within a group of ranks, replicas across groups, e.g.
one group per node). A unit's weights are all-gathered just before its forward (and again for its
backward) and freed after, so the largest unsharded piece is one layer.

What is not sharded:

- **The embeddings, the final norm and the output layer** (a few percent of a large base), so
  that tied input and output embeddings stay one tensor.
- **The agents' LoRA adapters and the critic's head** are FSDP's ``ignored_params``: each rank
  holds them whole, their gradients are summed over ranks explicitly in a fixed order (as in data
  parallelism, :mod:`marft_algos.distributed`), and the optimizers, clipping, checkpoints,
  snapshots and vLLM adapter syncs work on them unchanged. They are a fraction of a percent of a
  base's parameters (benchmarks/scaling/fsdp_plan.py gives the sizes).
- **Rollouts on the transformers backend** gather the whole base on every rank for the rollout
  phase (:meth:`ShardedModels.gathered`): each rank generates its own episodes, and decoding one
  token at a time through all-gathers would put every rank in lockstep with the slowest. A base
  that does not fit one device therefore needs the vLLM backend for rollouts, split over groups
  of ranks with ``tensor_parallel_size`` (:func:`rollout_group`), where the trainer's model
  only scores.

``--fsdp`` needs ``torchrun`` with two or more processes, and, with asynchronous rollouts
(``max_staleness``), the vLLM backend. ``marft train --fsdp`` loads the base's weights on rank 0
alone, on the host; the other ranks build it on the meta device (shapes, no storage). After
``fully_shard`` each rank allocates its shards on its GPU and rank 0 broadcasts the weights one
tensor at a time, each rank keeping its slice: no GPU ever holds the whole base while training
(rollouts on the transformers backend gather it, see above), and a node holds one host copy.

Every forward pass through a sharded unit is a collective, so under ``--fsdp`` every rank must run
the same number of them, in the same order: the update's loops walk the agents in one fixed order
and pad a rank's shorter list of chunks with passes whose loss is multiplied by 0
(:meth:`~marft_algos.distributed.DistributedContext.lockstep`). Gradients of the base never exist
(it is frozen), so FSDP reduces nothing; the sums stay marft's own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch

from marft_algos.distributed import DistributedContext
from marft_algos.trainers.sharded_weights import (
    load_from_rank0,
    loaded_empty,
    materialize,
    place_whole_parameters,
    refuse_empty,
)

__all__ = [
    "MIXED_PRECISION",
    "ShardedModels",
    "generating",
    "own_share",
    "rollout_group",
    "shard_models",
    "shard_run",
]

logger = logging.getLogger(__name__)

#: ``fsdp_mixed_precision``: the dtype the base's all-gathered weights compute in ("none": the
#: dtype they are stored in).
MIXED_PRECISION: dict[str, torch.dtype | None] = {
    "none": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
MixedPrecision = Literal["none", "bf16", "fp16"]


def _fsdp() -> Any:
    try:
        from torch.distributed import fsdp
    except ImportError as err:  # pragma: no cover - every supported torch has it
        raise RuntimeError(
            f"--fsdp needs torch.distributed.fsdp.fully_shard (torch >= 2.6); this torch "
            f"{torch.__version__} lacks it ({err})."
        ) from None
    return fsdp


def _device_mesh(dist: DistributedContext, replicas: int) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    if replicas < 1 or dist.world_size % replicas:
        raise ValueError(
            f"fsdp_replicas={replicas} must divide the number of processes ({dist.world_size}): "
            f"the base is sharded over world_size / fsdp_replicas ranks and replicated "
            f"fsdp_replicas times (e.g. --fsdp-replicas <nodes> for one shard group per node)."
        )
    device = dist.device.type
    if replicas == 1:
        return init_device_mesh(device, (dist.world_size,), mesh_dim_names=("shard",))
    return init_device_mesh(
        device, (replicas, dist.world_size // replicas), mesh_dim_names=("replicate", "shard")
    )


@dataclass
class ShardedModels:
    """The FSDP units of the base models of a run (see the module docstring).

    Attributes:
        units: Every ``FSDPModule``, innermost first.
        mesh: The device mesh they are sharded over.
    """

    units: list[Any]
    mesh: Any

    @contextlib.contextmanager
    def gathered(self) -> Iterator[None]:
        """Within the context every unit holds its whole weights on every rank, and forward passes
        run without collectives (each rank may run as many as it needs: a rollout). Entering and
        leaving are collectives: every rank must enter together."""
        for unit in self.units:
            unit.unshard()
            unit.set_reshard_after_forward(False, recurse=False)
        try:
            yield
        finally:
            for unit in self.units:
                unit.reshard()
                unit.set_reshard_after_forward(True, recurse=False)


def shard_models(
    models: Sequence[torch.nn.Module],
    dist: DistributedContext,
    *,
    replicas: int = 1,
    mixed_precision: MixedPrecision = "none",
) -> ShardedModels:
    """Shard each base model of ``models`` (transformers causal LMs, peft-wrapped or not) in place.

    Units: every decoder layer, each its own root (a critic reads the decoder's hidden states
    without the causal LM's forward). The embeddings, final norm and output layer stay whole on
    every rank (a few percent of a large base: 4.2 of Llama-3-70B's 141 GB in bfloat16), which
    keeps tied input and output embeddings one tensor. LoRA weights (any parameter named
    ``lora_``) and every other trainable parameter are left whole (FSDP's ``ignored_params``).

    Args:
        models: The distinct models to shard (the policy's base models, and a critic's own base).
        dist: The process group's context (more than one process).
        replicas: Hybrid sharding: replicate over this many groups, shard within each.
        mixed_precision: The dtype the gathered base weights compute in.

    Returns:
        The units and mesh, for :meth:`ShardedModels.gathered`.

    Raises:
        ValueError: ``replicas`` does not divide the world size, the mixed-precision name is
            unknown, or a model has no decoder layers transformers marks
            (``GradientCheckpointingLayer``).
    """
    from marft_algos.policy.checkpointing import decoder_layers
    from marft_algos.policy.forward import unwrap_causal_lm

    fsdp = _fsdp()
    if mixed_precision not in MIXED_PRECISION:
        raise ValueError(
            f"fsdp_mixed_precision must be one of {sorted(MIXED_PRECISION)}, got "
            f"{mixed_precision!r}."
        )
    mesh = _device_mesh(dist, replicas)
    options: dict[str, Any] = {"mesh": mesh}
    dtype = MIXED_PRECISION[mixed_precision]
    if dtype is not None:
        # Each layer computes in ``dtype`` and hands float32 on: the whole embeddings, norm and
        # output layer keep their stored dtype.
        options["mp_policy"] = fsdp.MixedPrecisionPolicy(
            param_dtype=dtype,
            reduce_dtype=torch.float32,
            output_dtype=torch.float32,
            cast_forward_inputs=True,
        )
    units: list[Any] = []

    def shard(module: torch.nn.Module, kept: set[Any]) -> None:
        mine = {p for p in module.parameters() if p in kept}
        fsdp.fully_shard(module, ignored_params=mine, **options)
        units.append(module)

    for model in models:
        kept = {p for n, p in model.named_parameters() if "lora_" in n or p.requires_grad}
        causal_lm = unwrap_causal_lm(model)
        layers = decoder_layers(causal_lm)
        if not layers:
            raise ValueError(
                f"{type(causal_lm).__name__} has no decoder layers transformers marks "
                f"(GradientCheckpointingLayer), so --fsdp cannot shard it layer by layer; train it "
                f"without --fsdp."
            )
        for layer in layers:
            shard(layer, kept)
    logger.info(
        "Sharded %d base model(s) into %d FSDP units over %d processes (%d replica group(s)).",
        len(models),
        len(units),
        dist.world_size,
        replicas,
    )
    return ShardedModels(units, mesh)


def shard_run(
    policy: Any, critic: Any, dist: DistributedContext, config: Any, rollout_backend: Any
) -> tuple[ShardedModels | None, DistributedContext]:
    """A trainer's sharding: its base models' FSDP units when ``config.fsdp`` asks (None
    otherwise: the policy's and a critic's own, each once), and ``dist`` marked ``sharded`` and
    with its :func:`rollout_group`. Sharded, the policy's update runs every row's padded prompt
    (one forward pass per chunk on every rank, not one per distinct prompt)."""
    dist = replace(dist, rollout_group=rollout_group(dist, config, rollout_backend))
    backbones = _backbones(policy, critic)
    models = list({id(b.model): b.model for b in backbones}.values())
    if not config.fsdp:
        refuse_empty(models)
        return None, dist
    if not dist.enabled:
        raise ValueError(
            "--fsdp shards the base model over processes, and this run has one. Launch it with "
            "torchrun --nproc_per_node N (N >= 2), or leave --fsdp out."
        )
    if config.max_staleness and rollout_backend is None:
        raise ValueError(
            f"--fsdp with --max-staleness {config.max_staleness} needs --rollout-backend vllm: a "
            f"rollout worker on the transformers backend would generate on the sharded model "
            f"while the update runs collectives on it. Use vLLM rollouts, or --max-staleness 0."
        )
    policy.share_prompts_in_update = False
    empty = loaded_empty(models, dist)
    # Rank 0's whole weights, for the ranks that loaded none (references, not copies).
    weights = [m.state_dict() for m in models] if empty and dist.rank == 0 else None
    sharded = shard_models(
        models,
        dist,
        replicas=config.fsdp_replicas,
        mixed_precision=config.fsdp_mixed_precision,
    )
    # A base loaded on the host (marft train --fsdp on GPUs): fully_shard moved each rank's
    # shards to its device; the whole parameters it leaves alone follow them.
    if empty:
        materialize(models, sharded.units, dist.device)
    for k, model in enumerate(models):
        place_whole_parameters(model, dist.device)
        if empty:
            load_from_rank0(model, weights[k] if weights is not None else {})
    del weights
    for backbone in backbones:
        backbone.device = dist.device
    head = getattr(critic, "head", None)
    if head is not None:
        head.to(dist.device)
    return sharded, replace(dist, sharded=True)


def generating(
    sharding: ShardedModels | None, rollout_backend: Any
) -> contextlib.AbstractContextManager[None]:
    """Where a rollout (or, with ``rollout_backend`` None, an evaluation) runs: with the base
    models gathered on every rank when they are sharded and the policy generates
    (:meth:`ShardedModels.gathered`)."""
    if sharding is None or rollout_backend is not None:
        return contextlib.nullcontext()
    return sharding.gathered()


def own_share(
    episodes: list[Any], dist: DistributedContext, unit: Callable[[int, Any], Hashable]
) -> list[Any]:
    """This rank's share of the episodes its rollout group collected: all of them unless the
    ranks of a tensor-parallel engine sample together; then whole units (``unit(index,
    episode)``: an episode, or a GRPO group) in order, dealt by
    :meth:`~marft_algos.distributed.DistributedContext.own_share`."""
    if dist.rollout_group == 1:
        return episodes
    units = list(dict.fromkeys(unit(k, e) for k, e in enumerate(episodes)))
    mine = {units[i] for i in dist.own_share(len(units))}
    return [e for k, e in enumerate(episodes) if unit(k, e) in mine]


def _backbones(policy: Any, critic: Any) -> list[Any]:
    """The policy's backbones, and a critic's own (one on another base model) after them."""
    own = getattr(critic, "backbone", None)
    return [*policy.backbones.values(), *([own] if own is not None else [])]


def rollout_group(dist: DistributedContext, config: Any, rollout_backend: Any) -> int:
    """How many consecutive ranks sample the same episodes: a tensor-parallel rollout engine's
    ranks (``rollout_backend.tensor_parallel_size``; 1 otherwise). Its ranks submit identical
    engine calls (same requests, same sampling seed) and split the episodes for the update.

    Raises:
        ValueError: The group does not divide the processes, the run is asynchronous, or the
            envs run agent programs (whose calls reach the engine in a thread-timed order).
    """
    size = int(getattr(rollout_backend, "tensor_parallel_size", 1) or 1)
    if size == 1 or not dist.enabled:
        return 1
    if dist.world_size % size:
        raise ValueError(
            f"--vllm-tensor-parallel-size {size} must divide the number of processes "
            f"({dist.world_size}): each group of {size} consecutive ranks shares one engine."
        )
    if config.max_staleness:
        raise ValueError(
            f"--vllm-tensor-parallel-size {size} under torchrun needs --max-staleness 0: the "
            f"ranks of an engine sample together, which asynchronous rollouts do not do."
        )
    return size
