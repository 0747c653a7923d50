"""Worker for tests/algos/test_distributed.py, run as a plain process or under torchrun.

python distributed_worker.py single OUT        # collect fixed batches, one-process updates
torchrun --nproc_per_node 2 distributed_worker.py ranks OUT   # the same updates on two ranks,
                                                               # then a short run with a router
python distributed_worker.py resume OUT        # resume the two-rank run on one process;
                                               # one-process async update of the ranks' batch
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(1)

from trainer_envs import DigitsEnv  # noqa: E402

from marft_algos.distributed import init_distributed  # noqa: E402
from marft_algos.policy import MultiAgentPolicy, tiny_model_path  # noqa: E402
from marft_algos.policy.critic import Critic  # noqa: E402
from marft_algos.trainers.action_marft import ActionMARFTConfig, ActionMARFTTrainer  # noqa: E402
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer  # noqa: E402
from marft_algos.trainers.reinforce_pp import REINFORCEPPConfig, REINFORCEPPTrainer  # noqa: E402
from marft_algos.trainers.rloo import RLOOConfig, RLOOTrainer  # noqa: E402
from marft_algos.trainers.token_marft import TokenMARFTConfig, TokenMARFTTrainer  # noqa: E402
from marft_envs import AgentProfile, FlexPOMDPEnv, Transition  # noqa: E402
from marft_envs.core.dependency import Router  # noqa: E402

KINDS = ("action", "token", "grpo", "rloo", "reinforce-pp")
# Adam's first step moves every weight by about lr·sign(g), so float round-off in a near-zero gradient
# element (sums taken in another order) moves it by up to ~lr·1e-4: a small lr keeps that below 1e-6.
SMALL = dict(
    episodes_per_iteration=8,
    rollout_threads=4,
    max_new_tokens=5,
    learning_rate=1e-4,
    entropy_coef=0.1,
    num_minibatches=2,  # the global minibatches must not depend on the number of processes
)


class SkipOnRankOne(FlexPOMDPEnv):
    """The writer acts only on rank 0's episodes: rank 1 never has a writer decision."""

    def __init__(self):
        profiles = [
            AgentProfile("writer", "Write digits."),
            AgentProfile("answerer", "Answer.", graded=True),
        ]
        skip = os.environ.get("RANK", "0") == "1"

        def choose(state):
            order = ["answerer"] if skip else ["writer", "answerer"]
            return order[len(state.actions)] if len(state.actions) < len(order) else None

        super().__init__(profiles, Router(choose))

    def _reset_task(self, options):
        self.target = int(self.np_random.integers(10, 99))

    def _observation(self, agent):
        return f"Number {self.target}."

    def _transition(self, actions):
        text = actions["answerer"]
        score = sum(ch.isalpha() for ch in text) / max(1, len(text))
        return Transition(reward=score, terminated=True, info={"correct": score > 0.5})


def build(
    kind,
    distributed,
    env_fn=lambda: DigitsEnv(team=2),
    engine=None,
    eval_env_fn=None,
    device="cpu",
    specs=None,
    critic_base=None,
    **overrides,
):
    """``kind``'s trainer on the tiny model; ``engine(policy)`` builds a rollout backend;
    ``device="meta"`` loads the base empty (sharded runs fill it from rank 0); ``critic_base``
    gives the critic its own base model (loaded from that path) instead of the policy's."""
    policy = MultiAgentPolicy.from_pretrained(
        str(tiny_model_path()), ["writer", "answerer"], seed=0, device=device, specs=specs
    )
    backend = {"eval_env_fn": eval_env_fn}
    if engine is not None:
        backend["rollout_backend"] = engine(policy)
    settings = {**SMALL, "iterations": 1, "seed": 0, **overrides}
    if kind == "grpo":
        config = GRPOConfig(num_generations=4, **settings)
        return GRPOTrainer(policy, env_fn, config, distributed=distributed, **backend)
    if kind == "rloo":  # token level, advantages standardised over both ranks' samples
        config = RLOOConfig(
            num_generations=4, level="token", normalize_advantages=True, beta=0.1, **settings
        )
        return RLOOTrainer(policy, env_fn, config, distributed=distributed)
    if kind == "reinforce-pp":  # one sample per task: the token statistics span both ranks
        config = REINFORCEPPConfig(num_generations=1, beta=0.1, **settings)
        return REINFORCEPPTrainer(policy, env_fn, config, distributed=distributed)
    config_cls, trainer_cls = {
        "action": (ActionMARFTConfig, ActionMARFTTrainer),
        "token": (TokenMARFTConfig, TokenMARFTTrainer),
    }[kind]
    settings["critic_learning_rate"] = 1e-3
    return trainer_cls(
        policy,
        env_fn,
        config_cls(**settings),
        critic=Critic(policy if critic_base is None else critic_base, seed=0, device=device),
        distributed=distributed,
        **backend,
    )


def relay_program(task, client):
    """An agent program (over the local endpoint): the writer, then the answerer; even-length
    answers pay."""
    plan = client.chat.completions.create(
        model="writer", messages=[{"role": "user", "content": f"Plan: {task}"}]
    )
    answer = client.chat.completions.create(
        model="answerer",
        messages=[{"role": "user", "content": f"{task}\n{plan.choices[0].message.content}"}],
    )
    return float(len(answer.choices[0].message.content or "") % 2 == 0)


def program_env():
    from marft_envs.programs import ProgramEnv

    tasks = [f"{a} + {b}" for a in range(10) for b in range(10)]
    return ProgramEnv(relay_program, ["writer", "answerer"], tasks, transport="http")


def params(trainer):
    out = {
        a: [p.detach().clone() for p in trainer.policy.trainable_parameters(a)]
        for a in trainer.trainable_agents()
    }
    if trainer.critic is not None:
        out["critic"] = [p.detach().clone() for p in trainer.critic.parameters()]
    return out


ASYNC_KINDS = ("action", "grpo")


def async_ranks(kind, dist, out):
    """An asynchronous run (max_staleness 1, 3 iterations) on this rank's worker; its first
    batch and update are kept, and the run is resumed from checkpoint-2 on as many ranks."""

    def run(iterations=3):
        return build(
            kind,
            dist,
            iterations=iterations,
            max_staleness=1,
            sync_check_every=1,
            output_dir=str(out / f"async-{kind}"),
            checkpoint_every=1,
        )

    trainer = run()
    first: dict = {}
    update = trainer.update

    def recording(episodes):
        if not first:
            first["episodes"] = pickle.dumps(episodes)  # as the update receives them
        metrics = update(episodes)
        if "metrics" not in first:
            first.update(metrics=metrics, params=params(trainer))
        return metrics

    trainer.update = recording
    try:
        records = trainer.train()
    finally:
        trainer.close()
    (out / f"async-{kind}-first-rank{dist.rank}.pkl").write_bytes(first["episodes"])
    resumed = run()
    try:
        resumed.resume(out / f"async-{kind}" / "checkpoint-2")
        again = resumed.train()
    finally:
        resumed.close()
    torch.save(
        {
            "params": params(trainer),
            "records": records,
            "first_metrics": first["metrics"],
            "first_params": first["params"],
            "resumed_params": params(resumed),
            "resumed_records": again,
        },
        out / f"async-{kind}-rank{dist.rank}.pt",
    )


def async_one_process(kind, dist, out):
    """The first update of a one-process asynchronous run on the two ranks' first batch."""
    episodes = [
        e
        for r in (0, 1)
        for e in pickle.loads((out / f"async-{kind}-first-rank{r}.pkl").read_bytes())
    ]
    trainer = build(kind, dist, iterations=1, max_staleness=1)
    trainer.async_rollouts.ready = (episodes, 0)  # as if its worker had sampled them
    try:
        (record,) = trainer.train()
    finally:
        trainer.close()
    torch.save({"params": params(trainer), "record": record}, out / f"async-{kind}-one.pt")


def main(mode: str, out: Path) -> None:
    dist = init_distributed("cpu")
    if mode == "single":
        for kind in KINDS:
            trainer = build(kind, dist)
            episodes = trainer.collect()
            (out / f"{kind}-episodes.pkl").write_bytes(pickle.dumps(episodes))
            metrics = trainer.update(episodes)
            torch.save({"params": params(trainer), "metrics": metrics}, out / f"{kind}-one.pt")
        return
    if mode == "ranks":
        for kind in KINDS:
            episodes = pickle.loads((out / f"{kind}-episodes.pkl").read_bytes())
            share = dist.shard(
                len(episodes)
            )  # contiguous: GRPO groups (4 episodes each) stay whole
            trainer = build(kind, dist)
            metrics = trainer.update([episodes[i] for i in share])
            torch.save(
                {"params": params(trainer), "metrics": metrics}, out / f"{kind}-rank{dist.rank}.pt"
            )
        # A short run where rank 1 never sees the writer: no hang, ranks stay identical.
        for kind in ("action", "grpo"):
            trainer = build(
                kind,
                dist,
                env_fn=SkipOnRankOne,
                iterations=2,
                sync_check_every=1,
                learning_rate=5e-3,
                output_dir=str(out / f"run-{kind}"),
                checkpoint_every=1,
            )
            records = trainer.train()
            torch.save(
                {"params": params(trainer), "records": records},
                out / f"run-{kind}-rank{dist.rank}.pt",
            )
        # An agent program over HTTP: each rank serves its own endpoint to its own episodes.
        trainer = build("grpo", dist, env_fn=program_env, iterations=1, sync_check_every=1)
        try:
            records = trainer.train()
        finally:
            trainer.close()
        torch.save(
            {"params": params(trainer), "records": records}, out / f"program-rank{dist.rank}.pt"
        )
        for kind in ASYNC_KINDS:
            async_ranks(kind, dist, out)
        return
    if mode == "resume":
        trainer = build(
            "action",
            dist,
            env_fn=SkipOnRankOne,
            iterations=3,
            learning_rate=5e-3,
            output_dir=str(out / "run-action"),
            checkpoint_every=1,
        )
        trainer.resume(out / "run-action" / "checkpoint-2")
        loaded = params(trainer)
        records = trainer.train()
        torch.save(
            {"loaded": loaded, "iteration": trainer.iteration, "records": records},
            out / "resumed.pt",
        )
        for kind in ASYNC_KINDS:
            async_one_process(kind, dist, out)
        return
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
