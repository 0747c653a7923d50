"""The trainers learn from the right numbers under every setting a user can choose, not only the
defaults: sampling temperature / top-k / top-p, gradient accumulation with an entropy bonus for
every trainer and loss type, heterogeneous tokenizers, token-level λ, per-agent normalisation,
Dr. GRPO's per-agent constant, rewards paid to agents that did not act."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainers import build
from trainer_envs import DigitsEnv

from marft_algos.common.advantages import normalize_advantages, token_level_gae
from marft_algos.common.layouts import token_layout
from marft_algos.common.log_probs import entropy_from_logits
from marft_algos.policy import AgentSpec, MultiAgentPolicy, tiny_model_path
from marft_algos.policy.critic import Critic
from marft_algos.policy.forward import action_logits, pack
from marft_algos.policy.rendering import render_prompt_ids
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.trainers.action_marft import ActionMARFTConfig, ActionMARFTTrainer
from marft_algos.trainers.token_marft import TokenMARFTConfig, TokenMARFTTrainer
from marft_envs import AgentProfile, FlexPOMDPEnv, Transition
from marft_envs.core.dependency import Router

MESSAGES = [
    [{"role": "user", "content": "Number 42."}],
    [{"role": "user", "content": "Say seven words now."}],
]


def _reference_truncated_log_probs(
    logits: torch.Tensor, targets, temperature: float, top_k: int, top_p: float
):
    """An independent implementation of the sampled distribution: temperature, top-k, top-p."""
    out = []
    for row_logits, row_targets in zip(logits, targets, strict=True):
        row = []
        for step, token in zip(row_logits, row_targets, strict=True):
            z = step.double() / temperature
            keep = torch.ones_like(z, dtype=torch.bool)
            if top_k:
                kth = torch.sort(z, descending=True).values[top_k - 1]
                keep &= z >= kth
            if top_p < 1:
                p = torch.softmax(torch.where(keep, z, torch.full_like(z, -math.inf)), -1)
                order = torch.argsort(p, descending=True)
                mass_before = torch.cumsum(p[order], 0) - p[order]
                nucleus = torch.zeros_like(keep)
                nucleus[order[mass_before < top_p]] = True
                keep &= nucleus
            logp = torch.log_softmax(torch.where(keep, z, torch.full_like(z, -math.inf)), -1)
            row.append(float(logp[token]))
        out.append(row)
    return out


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(0.5, 0, 1.0), (1.7, 0, 1.0), (0.8, 5, 1.0), (1.0, 0, 0.6), (0.7, 8, 0.8)],
)
def test_rollout_log_probs_are_those_of_the_sampled_distribution(
    tiny_path, temperature, top_k, top_p
):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["agent"], seed=0)
    gens = policy.generate(
        "agent",
        MESSAGES,
        GenerationSettings(
            max_new_tokens=6, temperature=temperature, top_k=top_k, top_p=top_p, seed=1
        ),
    )
    batch = pack(
        [g.prompt_ids for g in gens],
        [g.action_ids for g in gens],
        policy.backbone("agent").pad_id,
        "cpu",
    )
    with torch.no_grad(), policy.acting("agent") as model:
        logits = action_logits(model, batch)
    expected = _reference_truncated_log_probs(
        logits, [g.action_ids for g in gens], temperature, top_k, top_p
    )
    for gen, want in zip(gens, expected, strict=True):
        assert (gen.temperature, gen.top_k, gen.top_p) == (temperature, top_k, top_p)
        assert all(math.isfinite(x) for x in gen.log_probs)  # a sampled token is inside the cut
        torch.testing.assert_close(
            torch.tensor(gen.log_probs), torch.tensor(want, dtype=torch.float32), atol=1e-5, rtol=0
        )
    # The update recomputes the same distribution: ratio 1 before any step.
    recomputed = policy.token_log_probs(
        "agent",
        [g.prompt_ids for g in gens],
        [g.action_ids for g in gens],
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )
    for i, gen in enumerate(gens):
        got = recomputed.log_probs[i, recomputed.mask[i]]
        torch.testing.assert_close(got, torch.tensor(gen.log_probs), atol=1e-5, rtol=0)


def test_unmerged_path_agrees_with_the_merged_one(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["agent"], seed=0)
    kept = policy.generate(
        "agent", MESSAGES, GenerationSettings(max_new_tokens=5, temperature=0.6, top_k=6, seed=4)
    )
    policy.merge_adapters_for_generation = False  # the adapter through peft's LoRA layers
    recomputed = policy.generate(
        "agent", MESSAGES, GenerationSettings(max_new_tokens=5, temperature=0.6, top_k=6, seed=4)
    )
    for a, b in zip(kept, recomputed, strict=True):
        assert a.action_ids == b.action_ids
        torch.testing.assert_close(
            torch.tensor(a.log_probs), torch.tensor(b.log_probs), atol=1e-5, rtol=0
        )


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("action", {}),
        ("token", {}),
        ("grpo", {}),
        ("rloo", {"level": "action"}),
        ("rloo", {"level": "token"}),
        ("reinforce-pp", {"level": "token"}),
        ("reinforce-pp", {"level": "action"}),
    ],
)
@pytest.mark.parametrize(
    "sampling", [{"temperature": 0.5}, {"temperature": 1.3, "top_k": 6, "top_p": 0.9}]
)
def test_first_update_ratio_is_one_off_the_default_sampling(kind, extra, sampling, tiny_path):
    trainer = build(kind, tiny_path, iterations=1, **sampling, **extra)
    record = trainer.train()[-1]
    assert record["train/approx_kl"] < 1e-8 and record["train/clip_fraction"] == 0.0
    assert abs(record["train/ratio_mean"] - 1.0) < 1e-3 or kind == "grpo"
    if kind in ("rloo", "reinforce-pp"):  # the KL penalty in the reward is finite under the cut
        assert math.isfinite(record["train/kl"])


def test_entropy_with_cut_tokens_is_finite_and_has_a_finite_gradient():
    logits = torch.tensor(
        [[2.0, 1.0, -math.inf, 0.5], [-math.inf, -math.inf, 3.0, 1.0]], requires_grad=True
    )
    h = entropy_from_logits(logits)
    assert torch.isfinite(h).all()
    p = torch.softmax(torch.tensor([2.0, 1.0, 0.5]), -1)
    torch.testing.assert_close(h[0], -(p * p.log()).sum())
    h.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_normalising_equal_advantages_gives_zeros_not_noise():
    noisy = torch.full((6,), 0.37) + torch.tensor([0, 3e-8, 0, -3e-8, 0, 0])
    assert torch.equal(normalize_advantages(noisy), torch.zeros(6))
    assert torch.equal(
        normalize_advantages(torch.full((2, 3), -2.5), torch.ones(2, 3, dtype=torch.bool)),
        torch.zeros(2, 3),
    )
    spread = normalize_advantages(torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(
        spread, torch.tensor([-1.0, 0.0, 1.0]) * math.sqrt(1.5), atol=1e-6, rtol=0
    )


# ---------------------------------------------------------------------- accumulation invariance
def _grads(trainer, batch, accumulation, max_chunk_tokens=None, **objective):
    trainer.zero_grad()
    step = trainer.policy_gradient()
    step.accumulation_steps = accumulation
    step.max_chunk_tokens = max_chunk_tokens
    if objective:
        from dataclasses import replace

        step.objective = replace(step.objective, **objective)
    active = None
    step.backward(batch, active=active)
    grads = {}
    for agent in trainer.trainable_agents():
        grads[agent] = [
            p.grad.clone() if p.grad is not None else torch.zeros_like(p)
            for p in trainer.policy.trainable_parameters(agent)
        ]
    trainer.zero_grad()
    return grads


def _batch(trainer):
    episodes = trainer.collect()
    if trainer.critic is not None:
        return trainer.prepare_batch(episodes)
    batch = trainer.rollout_batch(episodes)
    adv, _ = trainer.batch_advantages(episodes, batch)
    return batch.with_targets(advantages=adv)


@pytest.mark.parametrize(
    ("kind", "team", "extra"),
    [
        ("action", 2, {}),
        ("action", 2, {"logprob_normalization": "token"}),
        ("token", 2, {}),
        ("ppo-action", 1, {}),
        ("ppo-token", 1, {}),
        ("grpo", 2, {"loss_type": "dapo"}),
        ("grpo", 2, {"loss_type": "bnpo"}),
        ("grpo", 2, {"loss_type": "grpo"}),
        ("grpo", 2, {"loss_type": "dr_grpo", "max_new_tokens_per_agent": {"answerer": 4}}),
        ("grpo", 2, {"loss_type": "dapo", "beta": 0.1}),
        ("rloo", 2, {"level": "action"}),
        ("rloo", 2, {"level": "action", "logprob_normalization": "word"}),
        ("rloo", 2, {"level": "token", "loss_type": "grpo", "normalize_advantages": True}),
        ("rloo", 2, {"level": "token", "loss_type": "dr_grpo", "num_generations": 4}),
        ("reinforce-pp", 2, {"level": "token", "kl_estimator": "k3"}),
        ("reinforce-pp", 2, {"level": "token", "loss_type": "bnpo", "beta": 0.0}),
        ("reinforce-pp", 2, {"level": "action", "normalize_advantages_per_agent": True}),
        ("reinforce-pp", 1, {"level": "token", "num_generations": 2, "baseline": "group"}),
    ],
)
def test_gradient_does_not_depend_on_accumulation_with_entropy_on(kind, team, extra, tiny_path):
    trainer = build(
        kind,
        tiny_path,
        team=team,
        iterations=1,
        episodes_per_iteration=8,
        rollout_threads=8,
        entropy_coef=0.3,
        **extra,
    )
    batch = _batch(trainer)
    one = _grads(trainer, batch, 1)
    # Split by count, and by a token bound (1: a row per chunk; 60: a few rows per chunk).
    for steps, bound in ((2, None), (3, None), (8, None), (1, 1), (1, 60)):
        split = _grads(trainer, batch, steps, bound)
        for agent in one:
            assert any(g.abs().sum() > 0 for g in one[agent]), agent
            for a, b in zip(one[agent], split[agent], strict=True):
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_entropy_bonus_is_weighted_like_the_loss(tiny_path):
    # With zero advantages only the entropy term remains: its value is each action's mean token
    # entropy averaged over decisions (action level), the same 1/N that weights each action's loss.
    trainer = build("action", tiny_path, iterations=1, entropy_coef=1.0)
    batch = _batch(trainer)
    batch = batch.with_targets(
        advantages=torch.zeros(len(batch)), values=batch.values, returns=batch.returns
    )
    result = trainer.policy_gradient().backward(batch)
    per_action = []
    for agent in dict.fromkeys(batch.agents):
        part = batch[batch.indices_of(agent)]
        with torch.no_grad():
            out = trainer.policy.token_log_probs(
                agent, list(part.prompt_ids), part.action_lists(), with_entropy=True
            )
        per_action += ((out.entropy * out.mask).sum(1) / out.mask.sum(1)).tolist()
    assert result["policy_loss"] == pytest.approx(0.0, abs=1e-7)
    assert result["loss"] == pytest.approx(-sum(per_action) / len(per_action), rel=1e-5)
    trainer.zero_grad()


def test_dr_grpo_constant_uses_each_agents_token_cap(tiny_path):
    caps = {"writer": 6, "answerer": 3}
    trainer = build(
        "grpo",
        tiny_path,
        iterations=1,
        loss_type="dr_grpo",
        max_new_tokens=6,
        max_new_tokens_per_agent={"answerer": 3},
        entropy_coef=0.0,
    )
    batch = _batch(trainer)
    result = trainer.policy_gradient().backward(batch)
    trainer.zero_grad()
    # At the first step every ratio is 1, so each token's loss is −A of its sequence.
    expected = sum(
        -float(batch.advantages[k]) * int(batch.lengths[k]) / (len(batch) * caps[agent])
        for k, agent in enumerate(batch.agents)
    )
    assert result["policy_loss"] == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert sorted(set(zip(batch.agents, batch.token_caps.tolist(), strict=True))) == [
        ("answerer", 3),
        ("writer", 6),
    ]


# ---------------------------------------------------------------------- token-level λ
def test_token_level_lambda_reaches_the_targets(tiny_path):
    trainer = build(
        "token", tiny_path, iterations=1, lam_token=0.5, gae_lambda=0.9, normalize_advantages=False
    )
    assert TokenMARFTConfig().lam_token == 1.0
    episodes = trainer.collect()
    batch = trainer.prepare_batch(episodes)
    layout = token_layout(episodes)
    grid = torch.zeros(layout.rewards.shape)
    for k, (row, col, n) in enumerate(layout.spans):
        grid[row, col : col + n] = batch.values[k, :n]
    adv, _ = token_level_gae(
        layout.rewards,
        grid,
        layout.action_end,
        layout.round_end,
        layout.dones,
        0.0,
        gamma=0.99,
        lam=0.9,
        gamma_token=1.0,
        lam_token=0.5,
        valid=layout.valid,
    )
    for k, (row, col, n) in enumerate(layout.spans):
        torch.testing.assert_close(batch.advantages[k, :n], adv[row, col : col + n])
    with pytest.raises(ValueError, match="lam_token must be in"):
        TokenMARFTConfig(lam_token=1.5)


# ---------------------------------------------------------------------- per-agent normalisation
@pytest.mark.parametrize("kind", ["action", "token"])
def test_per_agent_advantage_normalisation(kind, tiny_path):
    trainer = build(
        kind,
        tiny_path,
        iterations=1,
        episodes_per_iteration=8,
        rollout_threads=8,
        normalize_advantages_per_agent=True,
    )
    batch = trainer.prepare_batch(trainer.collect())
    for agent in ("writer", "answerer"):
        rows = batch.indices_of(agent)
        adv = batch.advantages[rows]
        values = adv if adv.dim() == 1 else adv[batch.action_mask[rows]]
        assert abs(float(values.mean())) < 1e-5
        assert float(values.std(unbiased=False)) == pytest.approx(1.0, abs=1e-3)


# ---------------------------------------------------------------------- heterogeneous tokenizers
@pytest.fixture(scope="module")
def other_tokenizer_model():
    return str(tiny_model_path(vocab_size=300, seed=5))


def test_critic_reads_foreign_agents_in_its_own_tokenizer(tiny_path, other_tokenizer_model):
    policy = MultiAgentPolicy.from_pretrained(
        tiny_path,
        ["writer", "answerer"],
        specs={"writer": AgentSpec(model=other_tokenizer_model)},
        seed=0,
    )
    assert policy.tokenizer("writer").get_vocab() != policy.tokenizer("answerer").get_vocab()
    critic = Critic(policy, model=tiny_path, seed=0)
    config = ActionMARFTConfig(
        iterations=1, episodes_per_iteration=4, rollout_threads=2, max_new_tokens=6
    )
    trainer = ActionMARFTTrainer(policy, lambda: DigitsEnv(team=2), config, critic=critic)
    episodes = trainer.collect()
    batch = trainer.prepare_batch(episodes)
    decisions = [d for e in episodes for d in e.decisions]
    critic_tok = critic.backbone.tokenizer
    for k, d in enumerate(decisions):
        want = render_prompt_ids(critic_tok, d.messages) if d.agent == "writer" else d.prompt_ids
        assert batch.critic_prompts()[k] == want
        if d.agent == "writer":
            assert want != d.prompt_ids  # the writer's own ids mean other tokens to the critic
    with torch.no_grad():
        expected = critic.action_values(batch.critic_prompts())
    torch.testing.assert_close(batch.values, expected)
    trainer.train()  # and the whole update runs


def test_token_level_refuses_a_critic_with_another_vocabulary(tiny_path, other_tokenizer_model):
    policy = MultiAgentPolicy.from_pretrained(
        tiny_path,
        ["writer", "answerer"],
        specs={"writer": AgentSpec(model=other_tokenizer_model)},
        seed=0,
    )
    config = TokenMARFTConfig(
        iterations=1, episodes_per_iteration=2, rollout_threads=2, max_new_tokens=4
    )
    with pytest.raises(
        ValueError, match=r"agents \['writer'\] use a tokenizer other than the critic's"
    ):
        TokenMARFTTrainer(
            policy, lambda: DigitsEnv(team=2), config, critic=Critic(policy, model=tiny_path)
        )


# ---------------------------------------------------------------------- rewards of idle agents
class _SkipEnv(FlexPOMDPEnv):
    """Round 0: both act. Round 1: only the answerer acts, but the writer is paid too."""

    def __init__(self, pay_before_acting: bool = False):
        profiles = [
            AgentProfile("writer", "Write."),
            AgentProfile("answerer", "Answer.", graded=True),
        ]

        def choose(state):
            order = (
                ["answerer"] if pay_before_acting or state.timestep == 1 else ["writer", "answerer"]
            )
            return order[len(state.actions)] if len(state.actions) < len(order) else None

        super().__init__(profiles, Router(choose), horizon=2)

    def _reset_task(self, options):
        pass

    def _observation(self, agent):
        return "Go."

    def _transition(self, actions):
        return Transition(
            reward={"writer": 0.25 + self.timestep, "answerer": 1.0}, terminated=self.timestep == 1
        )


def test_reward_paid_to_an_agent_that_did_not_act_reaches_its_latest_decision(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    collector = RolloutCollector(policy, [_SkipEnv()])
    (episode,) = collector.collect(1)
    writer = [d for d in episode.decisions if d.agent == "writer"]
    assert len(writer) == 1 and writer[0].timestep == 0
    # 0.25 for round 0 where it acted, plus 1.25 paid in round 1 where it did not.
    assert writer[0].reward == pytest.approx(1.5)
    assert sum(d.reward for d in episode.decisions if d.agent == "writer") == pytest.approx(
        episode.agent_returns["writer"]
    )


def test_reward_paid_to_an_agent_that_never_acted_is_refused(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    collector = RolloutCollector(policy, [_SkipEnv(pay_before_acting=True)])
    with pytest.raises(ValueError, match="'writer', which has not acted in this episode"):
        collector.collect(1)
