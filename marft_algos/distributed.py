"""Data parallelism over processes with ``torch.distributed`` (gloo on CPU, nccl on CUDA).

Launch any training script with a standard launcher — ``torchrun --nproc_per_node N
examples/train_math.py ...`` (or ``accelerate launch --multi_gpu`` on GPUs) — and every rank holds the base model(s) and
every agent's adapter, runs its share of the iteration's episodes, and takes the same optimizer
steps:

- the iteration's episode requests are drawn from one RNG seeded alike on every rank, and rank
  ``r`` runs the ``r``-th contiguous share of them (GRPO shares whole groups), so the global batch
  does not depend on the world size; sampling uses a per-rank generator derived from the run seed;
- every loss weight is computed from **global** counts (tokens, decisions: see
  :func:`~marft_algos.common.losses.sequence_weights`), so after each backward the ranks *sum*
  each agent's adapter gradients and the critic's — in one fixed order, with zeros for agents a
  rank saw no decision of — and every rank holds the gradient of the whole batch;
- advantage normalisation, value and loss statistics and the trust-region KL use global sums;
- rank 0 alone writes metrics, plots and checkpoints; evaluation is split across ranks and merged.

No rank ever skips a collective another rank enters: the decisions that depend on data (a
non-finite loss, an empty minibatch, the trust-region cut) are taken on globally reduced values.
:meth:`DistributedContext.check_in_sync` compares a checksum of every rank's adapters and fails
loudly on divergence. ``peft`` adapters inactive in a step never meet DDP's reducer: the gradient
sum is explicit, so no reducer waits for gradients that never come.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import torch

__all__ = ["DistributedContext", "init_distributed", "parse_device"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits in a data-parallel run (one process: rank 0 of 1).

    Attributes:
        rank: Global rank.
        world_size: Number of processes.
        local_rank: Rank on this node (picks the GPU).
        device: The device this rank computes on.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    rollout_group: int = 1
    """Consecutive ranks that sample the same episodes: the ranks of one tensor-parallel vLLM
    engine (``--vllm-tensor-parallel-size``), whose engine calls must be identical. Each keeps
    its own share of the group's episodes for the update (:meth:`own_share`)."""
    sharded: bool = False
    """The base models are sharded (``--fsdp``, :mod:`marft_algos.sharding`): every forward pass
    through them is a collective, so ranks run as many as each other (:meth:`lockstep`)."""

    @classmethod
    def current(cls) -> DistributedContext:
        """The process group already initialised (by :func:`init_distributed` or a launcher's
        library), or one process on the CPU."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return cls()
        local = int(os.environ.get("LOCAL_RANK", str(dist.get_rank())))
        device = (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend() == "nccl"
            else torch.device("cpu")
        )
        return cls(
            rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local, device=device
        )

    @property
    def enabled(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes files and prints."""
        return self.rank == 0

    # ------------------------------------------------------------------ sharding
    def shard(self, n: int) -> range:
        """This rank's contiguous share of ``n`` items (earlier ranks take the remainder)."""
        base, extra = divmod(n, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (1 if self.rank < extra else 0))

    def offset(self, n: int) -> tuple[int, int]:
        """``(first, total)``: where this rank's ``n`` items start in the global list (every
        rank's items concatenated in rank order, as :meth:`shard` deals them) and its length."""
        if not self.enabled:
            return 0, n
        counts = [int(c) for c in self.gather(int(n))]
        return sum(counts[: self.rank]), sum(counts)

    def rollout_shard(self, n: int) -> range:
        """The share of ``n`` items this rank's rollout group samples (:meth:`shard` over the
        groups; the rank's own share when the group is one rank)."""
        k = self.rollout_group
        return replace(self, rank=self.rank // k, world_size=self.world_size // k).shard(n)

    def own_share(self, n: int) -> range:
        """This rank's contiguous share of the ``n`` items its rollout group sampled (all of them
        when the group is one rank)."""
        k = self.rollout_group
        return replace(self, rank=self.rank % k, world_size=k).shard(n)

    def rollout_seed(self, seed: int) -> int:
        """The sampling seed of this rank's rollout group: its first rank's :meth:`rank_seed`."""
        k = self.rollout_group
        return replace(self, rank=self.rank - self.rank % k).rank_seed(seed)

    def rank_seed(self, seed: int) -> int:
        """A sampling seed for this rank derived from the run seed (rank 0 keeps ``seed``, so a
        one-process run is unchanged)."""
        if self.rank == 0:
            return int(seed)
        digest = hashlib.sha256(f"{seed}:{self.rank}".encode()).digest()
        return int.from_bytes(digest[:4], "little")

    def lockstep(
        self, plan: Mapping[str, Sequence[T]], order: Sequence[str]
    ) -> list[tuple[str, T | None]]:
        """The ``(agent, chunk)`` passes of ``plan`` (each agent's chunks on this rank), in the
        order every rank runs them.

        Unsharded: ``plan``'s own order, as given. Sharded: the agents of ``order`` one after
        another, each with as many passes as the rank with the most chunks of it; this rank's
        missing ones are ``None``, a pass whose loss counts 0 (one collective to agree).
        """
        if not self.sharded:
            return [(agent, part) for agent, parts in plan.items() for part in parts]
        counts = self.max([float(len(plan.get(agent, ()))) for agent in order])
        out: list[tuple[str, T | None]] = []
        for agent, count in zip(order, counts, strict=True):
            mine = list(plan.get(agent, ()))
            out += [(agent, mine[k] if k < len(mine) else None) for k in range(int(count))]
        return out

    # ------------------------------------------------------------------ collectives
    def _backend_device(self) -> torch.device:
        import torch.distributed as dist

        return (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend() == "nccl"
            else torch.device("cpu")
        )

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of a list of numbers over ranks (float64)."""
        if not self.enabled:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor(
            [float(v) for v in values], dtype=torch.float64, device=self._backend_device()
        )
        dist.all_reduce(t)
        return [float(v) for v in t.cpu()]

    def max(self, values: Sequence[float]) -> list[float]:
        """Element-wise maximum over ranks."""
        if not self.enabled:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor(
            [float(v) for v in values], dtype=torch.float64, device=self._backend_device()
        )
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [float(v) for v in t.cpu()]

    def sum_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over ranks in place, in the given (fixed) order.

        Parameters without a gradient on this rank contribute zeros and receive the sum, so every
        rank enters the same collective whatever it computed.
        """
        if not self.enabled:
            return
        import torch.distributed as dist

        params = list(params)
        if not params:
            return
        device = self._backend_device()
        flat = torch.cat(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p))
                .reshape(-1)
                .to(device, torch.float32)
                for p in params
            ]
        )
        dist.all_reduce(flat)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].reshape(p.shape).to(p.device, p.dtype)
            offset += n

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (pickled), in rank order."""
        if not self.enabled:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def check_in_sync(self, tensors: Iterable[torch.Tensor], what: str = "adapters") -> None:
        """Fail loudly if ``tensors`` differ between ranks (a checksum over their bytes)."""
        if not self.enabled:
            return
        digest = hashlib.sha256()
        for t in tensors:
            digest.update(t.detach().cpu().contiguous().numpy().tobytes())
        sums = self.gather(digest.hexdigest())
        if len(set(sums)) > 1:
            raise RuntimeError(
                f"Ranks hold different {what} (checksums {sums}): data-parallel training has diverged. "
                f"This is a bug (every rank must apply the same summed gradients); please report it "
                f"with the launch command."
            )

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier()


def parse_device(device: str | torch.device) -> torch.device:
    """``device`` as a :class:`torch.device`, or a ValueError that names it and the valid forms."""
    if isinstance(device, torch.device):
        return device
    try:
        return torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"--device {device!r} is not a torch device; use cpu, cuda, cuda:N (the N-th GPU) or "
            f"mps, or leave --device out to use this rank's GPU if there is one, else the CPU."
        ) from None


def init_distributed(
    device: str | torch.device | None = None, *, backend: str | None = None
) -> DistributedContext:
    """Join the process group a launcher set up, or describe the single process.

    Reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` as torchrun (and accelerate's multi-GPU launch) set
    them. Without them (or with ``WORLD_SIZE=1``) nothing is initialised and rank 0 of 1 is
    returned. The device: ``device`` if given (``"cuda"`` becomes this rank's ``cuda:LOCAL_RANK``),
    else this rank's GPU if CUDA is available, else the CPU. The backend: nccl for CUDA, gloo for
    CPU, unless ``backend`` says otherwise.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, or None to choose.
        backend: Process-group backend override.

    Returns:
        The :class:`DistributedContext` of this process.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if device is None:
        dev = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    else:
        dev = parse_device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", local)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={str(device)!r} asks for CUDA, but torch sees no GPU; use --device cpu."
            )
        torch.cuda.set_device(dev)
    if world <= 1:
        return DistributedContext(device=dev)
    import torch.distributed as dist

    if not dist.is_initialized():
        chosen = backend or ("nccl" if dev.type == "cuda" else "gloo")
        dist.init_process_group(backend=chosen, rank=rank, world_size=world)
        logger.info("Rank %d of %d joined the %s process group on %s.", rank, world, chosen, dev)
    return DistributedContext(rank=rank, world_size=world, local_rank=local, device=dev)
