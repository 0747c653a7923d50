"""Worker for tests/algos/trainers/test_fsdp.py, under torchrun or as one process.

python distributed_worker.py single OUT               # fixed batches, one-process updates
torchrun --nproc_per_node 2 fsdp_worker.py ranks OUT   # the same updates with fsdp=True, then a
                                                       # short run where rank 1 lacks an agent
python fsdp_worker.py resume OUT                       # resume that run on one process
torchrun --nproc_per_node 2 fsdp_worker.py tensor-parallel OUT   # rollouts on one stand-in
python fsdp_worker.py tensor-parallel OUT              # engine of 2 ranks; the same, 1 process
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(1)

from distributed_worker import KINDS, SMALL, SkipOnRankOne, build, params  # noqa: E402
from trainer_envs import DigitsEnv  # noqa: E402

from marft_algos.distributed import DistributedContext, init_distributed  # noqa: E402
from marft_algos.policy import AgentSpec, MultiAgentPolicy, tiny_model_path  # noqa: E402
from marft_algos.policy.adapters import save_one_adapter  # noqa: E402
from marft_algos.policy.critic import Critic  # noqa: E402
from marft_algos.policy.forward import unwrap_causal_lm  # noqa: E402
from marft_algos.trainers.ppo import PPOConfig, PPOTrainer  # noqa: E402

#: The agent layouts, a critic on its own base, and the one-agent baseline, beyond build()'s
#: one adapter per agent with the critic on the policy's base.
LAYOUTS = ("shared", "frozen", "frozen-trained", "critic-base", "ppo")


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


class TensorParallelEngine:
    """Stands in for a vLLM engine shared by a tensor-parallel group of ranks: its own copy of
    the policy (an engine holds its own weights) and a log of every call, which the ranks of one
    engine must make identically."""

    def __init__(self, policy, size):
        self.own = copy.deepcopy(policy)
        self.tensor_parallel_size = size
        self.calls = []

    def generate(self, agent, messages_batch, settings, *, generator=None):
        out = self.own.generate(agent, messages_batch, settings, generator=generator)
        self.calls.append((agent, [g.prompt_ids for g in out], [g.action_ids for g in out]))
        return out

    def sync_adapters(self, policy, version):
        for agent in policy.agents:
            with torch.no_grad():
                for p, q in zip(
                    self.own.trainable_parameters(agent),
                    policy.trainable_parameters(agent),
                    strict=True,
                ):
                    p.copy_(q)


def tensor_parallel(kind, dist, size, **overrides):
    """Two iterations of ``kind`` with rollouts on a stand-in engine of ``size`` ranks."""
    trainer = build(
        kind,
        dist,
        engine=lambda policy: TensorParallelEngine(policy, size),
        eval_env_fn=lambda: DigitsEnv(team=2),  # the policy evaluates (gathered when sharded)
        eval_episodes=4,
        iterations=2,
        **overrides,
    )
    kept = []
    update = trainer.update
    trainer.update = lambda episodes: kept.append(len(episodes)) or update(episodes)
    records = trainer.train()
    return {
        "params": params(trainer),
        "records": [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records],
        "calls": trainer.rollout_backend.calls,
        "kept": kept,
    }


def trained_adapter(folder: Path) -> Path:
    """A saved writer adapter whose weights are not LoRA's identity start (a fine-tuned agent)."""
    if not folder.exists():
        policy = MultiAgentPolicy.from_pretrained(str(tiny_model_path()), ["writer"], seed=0)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in policy.trainable_parameters("writer"):
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
        save_one_adapter(policy.backbone("writer"), "writer", folder)
    return folder


def layout(name, dist, out, **overrides):
    """GRPO with one adapter shared by both agents; action-level MARFT with the writer frozen
    (it acts, never trains) on the plain base or with a saved adapter, or with a critic on its
    own base model; single-agent PPO."""
    if name == "shared":
        team = AgentSpec(adapter="team")
        return build("grpo", dist, specs={"writer": team, "answerer": team}, **overrides)
    if name == "frozen":
        return build("action", dist, specs={"writer": AgentSpec(trainable=False)}, **overrides)
    if name == "frozen-trained":  # read on rank 0; an empty base takes it from rank 0
        saved = str(trained_adapter(out / f"writer-adapter-rank{dist.rank}"))
        writer = AgentSpec(trainable=False, adapter_path=saved)
        return build("action", dist, specs={"writer": writer}, **overrides)
    if name == "critic-base":  # a second base model, sharded (and loaded empty) on its own
        return build("action", dist, critic_base=str(tiny_model_path()), **overrides)
    device = overrides.pop("device", "cpu")
    policy = MultiAgentPolicy.from_pretrained(
        str(tiny_model_path()), ["answerer"], seed=0, device=device
    )
    settings = {**SMALL, "iterations": 1, "seed": 0, "critic_learning_rate": 1e-3, **overrides}
    return PPOTrainer(
        policy,
        lambda: DigitsEnv(team=1),
        PPOConfig(**settings),
        critic=Critic(policy, seed=0),
        distributed=dist,
    )


def without_writer_tokens(episodes, which):
    """``episodes`` with the writer's decisions in episodes ``which`` holding no tokens."""
    for k in which:
        episodes[k].decisions = [
            dataclasses.replace(d, action_ids=[], log_probs=[]) if d.agent == "writer" else d
            for d in episodes[k].decisions
        ]
    return episodes


def tied(trainer) -> bool:
    """Whether the base's output layer is still its input embedding (the tiny model ties them)."""
    causal_lm = unwrap_causal_lm(trainer.policy.backbone(trainer.policy.agents[0]).model)
    return causal_lm.get_output_embeddings().weight is causal_lm.get_input_embeddings().weight


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
            # Rank 1 loads the base empty and receives rank 0's weights (marft train --fsdp).
            trainer = build(kind, dist, fsdp=True, device="meta" if dist.rank else "cpu")
            if kind == "token":  # layers recompute their activations in the backward pass
                trainer.policy.gradient_checkpointing = True
            metrics = trainer.update(share)
            torch.save(
                {
                    "params": params(trainer),
                    "metrics": metrics,
                    "bytes": base_bytes(trainer),
                    "tied": tied(trainer),
                },
                out / f"fsdp-{kind}-rank{dist.rank}.pt",
            )
        # Each layout's one-process update (every rank collects the same batch: same seed), then
        # the sharded one on this rank's share.
        for name in LAYOUTS:
            one = layout(name, DistributedContext(), out)
            episodes = one.collect()
            result = {"one": one.update(episodes), "one_params": params(one)}
            trainer = layout(name, dist, out, fsdp=True, device="meta" if dist.rank else "cpu")
            result["metrics"] = trainer.update([episodes[i] for i in dist.shard(len(episodes))])
            result["params"] = params(trainer)
            bases = trainer.policy.backbones
            result["adapters"] = {  # every adapter, frozen ones too, as this rank holds them
                adapter: [p.detach().clone() for p in bases[base].adapter_parameters(adapter)]
                for base, adapter in trainer.policy.adapter_groups()
            }
            torch.save(result, out / f"layout-{name}-rank{dist.rank}.pt")
        # Rank 1's writer decisions without tokens (its chunks still run their passes).
        for kind in ("action", "grpo"):
            episodes = without_writer_tokens(
                pickle.loads((out / f"{kind}-episodes.pkl").read_bytes()),
                DistributedContext(rank=1, world_size=2).shard(8),
            )
            one = build(kind, DistributedContext())
            result = {"one": one.update(episodes), "one_params": params(one)}
            trainer = build(kind, dist, fsdp=True)
            result["metrics"] = trainer.update([episodes[i] for i in dist.shard(len(episodes))])
            result["params"] = params(trainer)
            torch.save(result, out / f"tokenless-{kind}-rank{dist.rank}.pt")
        # Hybrid sharding (2 replica groups of 1 shard each) and bf16 compute, on GRPO's batch.
        episodes = pickle.loads((out / "grpo-episodes.pkl").read_bytes())
        share = [episodes[i] for i in dist.shard(len(episodes))]
        for name, extra in (
            ("hsdp", {"fsdp_replicas": 2}),
            ("bf16", {"fsdp_mixed_precision": "bf16"}),
        ):
            trainer = build("grpo", dist, fsdp=True, device="meta" if dist.rank else "cpu", **extra)
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
    if mode == "tensor-parallel":  # 2 ranks: one engine of 2 (and sharded), vs 1 process
        size = dist.world_size
        for kind in ("action", "grpo"):
            result = tensor_parallel(kind, dist, size, fsdp=dist.enabled)
            torch.save(result, out / f"tp-{kind}-rank{dist.rank}-of{size}.pt")
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
