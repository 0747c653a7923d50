"""Worker for tests/algos/trainers/test_fsdp.py, under torchrun or as one process.

python distributed_worker.py single OUT               # fixed batches, one-process updates
torchrun --nproc_per_node 2 fsdp_worker.py ranks OUT   # the same updates with fsdp=True, then a
                                                       # short run where rank 1 lacks an agent
python fsdp_worker.py resume OUT                       # resume that run on one process
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(1)

from distributed_worker import KINDS, SkipOnRankOne, build, params  # noqa: E402

from marft_algos.distributed import init_distributed  # noqa: E402
from marft_algos.policy.forward import unwrap_causal_lm  # noqa: E402


def base_bytes(trainer) -> tuple[int, int, int]:
    """``(this rank's, whole, the decoder layers')`` bytes of the base model's parameters
    (adapters left out)."""
    causal_lm = unwrap_causal_lm(trainer.policy.backbone("writer").model)
    mine = whole = layers = 0
    for name, p in causal_lm.named_parameters():
        if "lora_" in name:
            continue
        local = p.to_local() if hasattr(p, "to_local") else p
        mine += local.numel() * local.element_size()
        whole += p.numel() * p.element_size()
        layers += p.numel() * p.element_size() if ".layers." in f".{name}" else 0
    return mine, whole, layers


def run(dist, out, **overrides):
    settings = {
        "iterations": 2,
        "sync_check_every": 1,
        "learning_rate": 5e-3,
        "output_dir": str(out / "run-fsdp"),
        "checkpoint_every": 1,
        **overrides,
    }
    return build("action", dist, env_fn=SkipOnRankOne, **settings)


def main(mode: str, out: Path) -> None:
    dist = init_distributed("cpu")
    if mode == "ranks":
        for kind in KINDS:
            episodes = pickle.loads((out / f"{kind}-episodes.pkl").read_bytes())
            share = [episodes[i] for i in dist.shard(len(episodes))]
            trainer = build(kind, dist, fsdp=True)
            if kind == "token":  # layers recompute their activations in the backward pass
                trainer.policy.gradient_checkpointing = True
            metrics = trainer.update(share)
            torch.save(
                {"params": params(trainer), "metrics": metrics, "bytes": base_bytes(trainer)},
                out / f"fsdp-{kind}-rank{dist.rank}.pt",
            )
        # Hybrid sharding (2 replica groups of 1 shard each) and bf16 compute, on GRPO's batch.
        episodes = pickle.loads((out / "grpo-episodes.pkl").read_bytes())
        share = [episodes[i] for i in dist.shard(len(episodes))]
        for name, extra in (
            ("hsdp", {"fsdp_replicas": 2}),
            ("bf16", {"fsdp_mixed_precision": "bf16"}),
        ):
            trainer = build("grpo", dist, fsdp=True, **extra)
            metrics = trainer.update(share)
            torch.save(
                {"params": params(trainer), "metrics": metrics, "bytes": base_bytes(trainer)},
                out / f"fsdp-{name}-rank{dist.rank}.pt",
            )
        # Rollouts (the base gathered), the update (rank 1 never has a writer decision: it runs
        # stand-in passes), evaluation-free checkpoints every iteration.
        trainer = run(dist, out, fsdp=True)
        records = trainer.train()
        # As if killed after its first checkpoint: the second iteration again, sharded.
        again = run(dist, out, fsdp=True)
        again.resume(out / "run-fsdp" / "checkpoint-1")
        resumed = again.train()
        torch.save(
            {
                "params": params(trainer),
                "records": records,
                "resumed_params": params(again),
                "resumed_records": resumed,
            },
            out / f"run-fsdp-rank{dist.rank}.pt",
        )
        return
    if mode == "resume":  # one process, no sharding: the checkpoint is the same format
        trainer = run(dist, out, iterations=3)
        trainer.resume(out / "run-fsdp" / "checkpoint-2")
        loaded = params(trainer)
        records = trainer.train()
        torch.save({"loaded": loaded, "records": records}, out / "run-fsdp-resumed.pt")
        return
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
