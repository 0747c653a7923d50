"""GRPO with ``branch`` on the built-in tiny model: the advantages it trains on are the branched
advantages of the recorded returns, each shared decision is trained once, seeded runs repeat,
parameters change, and the settings no trainer can honour are refused."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from test_trainers import adapter_params, build, changed
from trainer_envs import DigitsEnv

from marft_algos.common.branching import branch_advantages
from marft_algos.policy import MultiAgentPolicy
from marft_algos.rollout.branching import BranchingCollector, EnvNotCopyable
from marft_algos.trainers.action_marft import ActionMARFTConfig
from marft_algos.trainers.branched import without_copies
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
from marft_algos.trainers.reinforce_pp import REINFORCEPPConfig
from marft_algos.trainers.rloo import RLOOConfig

BRANCH = {"answerer": {"width": 2, "rollouts": 2}}


def _branched(tiny_path, branch=BRANCH, kind="grpo", **overrides):
    settings = {"num_generations": 2, "episodes_per_iteration": 16, "rounds": 2, **overrides}
    return build(kind, tiny_path, branch=branch, **settings)


def _expected(episodes, batch, scale):
    """Branched advantages recomputed from the episodes' recorded team returns."""
    leaves = {(e.group, *e.branch): e.team_return for e in episodes}
    samples = [
        ((e.group, *d.branch), d.agent)
        for e in episodes
        for d in e.decisions
        if not d.branch_copy and d.agent in set(batch.agents)
    ]
    return branch_advantages(leaves, samples, scale_rewards=scale).advantages


def _rloo_expected(episodes, batch, normalize):
    adv = _expected(episodes, batch, "none")
    if normalize:  # TRL's statistics over the decisions
        adv = (adv - adv.mean()) / (adv.std() + 1e-4)
    return adv


@pytest.mark.parametrize(
    ("kind", "options", "expected"),
    [
        ("grpo", {"scale_rewards": "group"}, lambda e, b: _expected(e, b, "group")),
        ("grpo", {"scale_rewards": "none"}, lambda e, b: _expected(e, b, "none")),
        ("grpo", {"scale_rewards": "batch"}, lambda e, b: _expected(e, b, "batch")),
        ("rloo", {"beta": 0.0}, lambda e, b: _rloo_expected(e, b, False)),
        (
            "rloo",
            {"beta": 0.0, "normalize_advantages": True},
            lambda e, b: _rloo_expected(e, b, True),
        ),
    ],
)
def test_trainers_train_on_the_branched_advantages_of_each_decision_once(
    tiny_path, kind, options, expected
):
    trainer = _branched(tiny_path, kind=kind, iterations=1, **options)
    assert isinstance(trainer.collector, BranchingCollector)
    seen = []
    original = trainer.batch_advantages

    def spy(episodes, batch):
        out = original(episodes, batch)
        seen.append((episodes, batch, out))
        return out

    trainer.batch_advantages = spy
    before = {a: adapter_params(trainer, a) for a in trainer.agents}
    record = trainer.train()[-1]  # after the evaluation before training
    episodes, batch, (advantages, _) = seen[-1]
    # 2 tasks × 2 trees × (2 alternatives × 2 continuations), every episode reaching the answerer.
    assert len(episodes) == 16 and record["rollout/episodes"] == 16
    # The batch holds each decision once: no copy of a shared prefix.
    assert not any(d.branch_copy for e in episodes for d in e.decisions)
    # Per tree 4 episodes × 4 decisions, less 3 copies of the writer's and 2 of the answer's.
    assert len(batch) == sum(len(e.decisions) for e in episodes) == 4 * (16 - 5)
    assert torch.allclose(advantages, expected(episodes, batch), atol=1e-5)
    assert advantages.abs().sum() > 0
    for agent in trainer.agents:
        assert f"branch/{agent}/value_spread" in record and f"branch/{agent}/flat_share" in record
    assert any(changed(before[a], adapter_params(trainer, a)) for a in trainer.agents)


def test_branched_trees_share_their_prefix_and_split_at_the_branch(tiny_path):
    trainer = _branched(tiny_path)
    episodes = trainer.collect()
    trees = {}
    for e in episodes:
        trees.setdefault((e.group, e.branch[0]), []).append(e)
    assert len(trees) == 4 and all(len(t) == 4 for t in trees.values())
    for tree in trees.values():
        writers = [e.decisions[0] for e in tree]  # the writer acts before the branch point
        assert len({tuple(d.action_ids) for d in writers}) == 1
        answers = [e.decisions[1] for e in tree]  # the branched decision: 2 alternatives
        assert answers[0].action_ids == answers[1].action_ids
        assert answers[2].action_ids == answers[3].action_ids
        assert answers[0].prompt_ids == answers[2].prompt_ids  # from the same observation
        later = [tuple(e.decisions[2].action_ids) for e in tree]  # round 2: each its own
        assert [e.decisions[2].branch_copy for e in tree] == [False] * 4
        assert len(later) == 4
    kept = [len(e.decisions) for e in without_copies(episodes)[:4]]
    assert kept == [4, 2, 3, 2]  # copies of the writer's turn and of the answer left out


def test_seeded_branched_runs_repeat_exactly(tiny_path):
    params = []
    for _ in range(2):
        trainer = _branched(tiny_path, iterations=2)
        trainer.train()
        params.append({a: adapter_params(trainer, a) for a in trainer.agents})
    for agent in params[0]:
        for name, value in params[0][agent].items():
            assert torch.equal(value, params[1][agent][name]), name


class _LockedDigits(DigitsEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.lock = threading.Lock()


def test_an_env_that_cannot_be_copied_is_refused(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    config = GRPOConfig(
        iterations=1, episodes_per_iteration=4, num_generations=1, max_new_tokens=4, branch=BRANCH
    )
    with pytest.raises(EnvNotCopyable, match=r"Define _LockedDigits.clone\(\)"):
        GRPOTrainer(policy, _LockedDigits, config)
    with pytest.raises(ValueError, match="does not have"):
        GRPOTrainer(
            policy,
            DigitsEnv,
            GRPOConfig(**{**config.to_dict(), "branch": {"critic": {"width": 2, "rollouts": 2}}}),
        )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda b: RLOOConfig(branch=b), "set beta=0 with branch"),
        (lambda b: REINFORCEPPConfig(branch=b), "Branching trains with GRPO, RLOO"),
        (
            lambda b: ActionMARFTConfig(branch=b, episodes_per_iteration=6),
            "one task with branch, 4",
        ),
        (
            lambda b: GRPOConfig(branch=b, episodes_per_iteration=6, num_generations=1),
            "multiple of",
        ),
        (
            lambda b: GRPOConfig(
                branch=b, max_staleness=1, episodes_per_iteration=4, num_generations=1
            ),
            "max_staleness=0",
        ),
        (
            lambda b: GRPOConfig(
                branch=b, reward_source="agent", episodes_per_iteration=4, num_generations=1
            ),
            "reward_source='team'",
        ),
    ],
)
def test_settings_branching_cannot_honour_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make(BRANCH)


def test_branch_takes_one_tree_per_task_and_counts_its_episodes():
    config = GRPOConfig(branch=BRANCH, num_generations=1, episodes_per_iteration=8)
    assert config.episodes_per_task == 4 and config.groups_per_iteration == 2
    with pytest.raises(ValueError, match="num_generations must be >= 2"):
        GRPOConfig(num_generations=1, episodes_per_iteration=8)


@pytest.mark.parametrize("kind", ["action", "token"])
def test_marft_puts_the_trees_values_at_branched_states_and_trains_each_decision_once(
    tiny_path, kind
):
    trainer = build(
        kind,
        tiny_path,
        branch=BRANCH,
        episodes_per_iteration=8,
        rounds=2,
        normalize_advantages=False,
    )
    assert isinstance(trainer.collector, BranchingCollector)
    episodes = trainer.collect()
    assert len(episodes) == 8  # two trees of 2 alternatives × 2 continuations
    level = trainer.granularity
    seen = {}
    original = level.targets

    def spy(eps, values, settings):
        seen["values"] = values
        return original(eps, values, settings)

    level.targets = spy
    batch = trainer.prepare_batch(episodes)
    full = trainer.rollout_batch(episodes)
    critic = trainer.rollout_values(full)
    critic_first = critic if critic.dim() == 1 else critic[:, 0]
    used = seen["values"] if critic.dim() == 1 else seen["values"][:, 0]
    # Each tree by hand: V(s, u_w) = mean of its 2 continuations, V(s) = mean over the 2 alternatives.
    expected, k = [], 0
    for tree in range(2):
        leaves = episodes[4 * tree : 4 * tree + 4]
        alt = [(leaves[2 * w].team_return + leaves[2 * w + 1].team_return) / 2 for w in range(2)]
        for j, e in enumerate(leaves):
            for i, _ in enumerate(e.decisions):
                # decision 1: the answer branched in round 0 (its state's value); decision 2: the
                # writer's next turn, which starts from the alternative's state
                tree_value = {1: sum(alt) / 2, 2: alt[j // 2]}.get(i)
                expected.append(float(critic_first[k]) if tree_value is None else tree_value)
                k += 1
    assert used.tolist() == pytest.approx(expected, abs=1e-6)
    if critic.dim() == 2:  # every other token keeps the critic's value
        assert torch.equal(seen["values"][:, 1:], critic[:, 1:])
    keep = [k for k, d in enumerate(d for e in episodes for d in e.decisions) if not d.branch_copy]
    assert len(batch) == len(keep) == 2 * (16 - 5)
    advantages, returns = original(episodes, seen["values"], trainer.config)
    assert torch.allclose(batch.advantages, advantages[keep]) and torch.allclose(
        batch.returns, returns[keep]
    )
    assert torch.allclose(batch.values, critic[keep])  # the critic's own, for value clipping


@pytest.mark.parametrize("kind", ["action", "token"])
def test_branched_marft_changes_parameters(tiny_path, kind):
    trainer = build(kind, tiny_path, branch=BRANCH, episodes_per_iteration=4, iterations=1)
    before = {a: adapter_params(trainer, a) for a in trainer.agents}
    record = trainer.train()[-1]
    assert record["rollout/episodes"] == 4 and math.isfinite(record["train/policy_loss"])
    assert any(changed(before[a], adapter_params(trainer, a)) for a in trainer.agents)
    # The same branch/... metrics as the critic-free trainers log.
    assert record["branch/dropped_samples"] == 0
    assert 0 <= record["branch/answerer/flat_share"] <= 1  # the agent branched at
    assert record["branch/answerer/value_spread"] >= 0
    assert "branch/writer/flat_share" not in record  # never branched at: nothing to compare
