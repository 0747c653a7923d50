"""Every preset, with every algorithm, starts on 8 processes and gives each one a full share of
rollouts: the command line scales episodes per iteration with the world size and says so
(issue 40)."""

from __future__ import annotations

import pytest

from marft_algos.cli.env_plan import plan_env
from marft_algos.cli.presets import PRESETS, preset_for, scale_for_world
from marft_algos.cli.train import build_config, parse_train_args
from marft_algos.distributed import DistributedContext
from marft_algos.trainers.critic_free import CriticFreeTrainer
from marft_algos.trainers.registry import ALGORITHMS

WORLD = 8


@pytest.fixture(scope="module")
def teams(tiny_path):
    """The env plan and a policy of a team (PPO: one agent)."""
    from marft_algos.policy import MultiAgentPolicy

    out = {}
    for env_id in ("math-dual-v7", "math-single-v7"):
        plan = plan_env(env_id, None)
        out[env_id] = plan, MultiAgentPolicy.from_pretrained(tiny_path, plan.agents, seed=0)
    return out


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_preset_and_algorithm_starts_on_8_processes(teams, preset, algo, tmp_path):
    from marft_algos.policy.critic import Critic

    plan, policy = teams["math-single-v7" if algo == "ppo" else "math-dual-v7"]
    _, _, values, given = parse_train_args(
        ["--algo", algo, "--preset", preset, "--output-dir", str(tmp_path / "run")]
    )
    one = values["episodes_per_iteration"]
    values, note = scale_for_world(values, given, WORLD)
    assert note is not None and f"{one} -> {one * WORLD}" in note
    config = build_config(algo, values, plan.agents)
    _, trainer_class = ALGORITHMS[algo]
    critic = {} if issubclass(trainer_class, CriticFreeTrainer) else {"critic": Critic(policy)}
    env_fn, _ = plan.factories()
    trainer = trainer_class(
        policy,
        env_fn,
        config,
        distributed=DistributedContext(rank=0, world_size=WORLD),
        **critic,
    )
    # Each of the 8 processes collects what one process collects alone.
    assert trainer.shards_per_iteration() >= WORLD
    assert len(trainer.dist.shard(config.episodes_per_iteration)) == one


def test_a_chosen_episode_count_is_kept_and_one_process_is_unchanged():
    values = {"episodes_per_iteration": 64, "rollout_threads": 16}
    assert scale_for_world(values, {"episodes_per_iteration"}, WORLD) == (values, None)
    assert scale_for_world(values, set(), 1) == (values, None)
    scaled, _ = scale_for_world(values, set(), 4)
    assert scaled == {"episodes_per_iteration": 256, "rollout_threads": 16}
    assert preset_for("marft-tiny-math")["episodes_per_iteration"] == 64  # presets stay per process
