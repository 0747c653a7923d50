"""Every trainer on the tiny model on CPU: finite losses, parameters change, seeded runs repeat,
resume continues the same run, and the guards (frozen agents, agent-by-agent, trust region,
non-finite losses, entropy blow-ups) behave as documented."""

from __future__ import annotations

import json
import math

import pytest
import torch
from trainer_envs import DigitsEnv

from marft_algos.policy import AgentSpec, MultiAgentPolicy
from marft_algos.policy.critic import Critic
from marft_algos.trainers.action_marft import ActionMARFTConfig, ActionMARFTTrainer
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
from marft_algos.trainers.ppo import PPOConfig, PPOTrainer
from marft_algos.trainers.reinforce_pp import REINFORCEPPConfig, REINFORCEPPTrainer
from marft_algos.trainers.rloo import RLOOConfig, RLOOTrainer
from marft_algos.trainers.token_marft import TokenMARFTConfig, TokenMARFTTrainer

SMALL = dict(
    iterations=2,
    episodes_per_iteration=4,
    rollout_threads=2,
    max_new_tokens=6,
    learning_rate=5e-3,
    critic_learning_rate=1e-3,
    eval_episodes=4,
)

#: The critic-free trainers by test name.
CRITIC_FREE = {
    "grpo": (GRPOConfig, GRPOTrainer),
    "rloo": (RLOOConfig, RLOOTrainer),
    "reinforce-pp": (REINFORCEPPConfig, REINFORCEPPTrainer),
}


def build(
    kind,
    tiny_path,
    team=2,
    seed=0,
    output_dir=None,
    specs=None,
    rounds=1,
    binary=False,
    **overrides,
):
    agents = ["writer", "answerer"] if team == 2 else ["answerer"]
    policy = MultiAgentPolicy.from_pretrained(tiny_path, agents, specs=specs, seed=seed)
    env_fn = lambda: DigitsEnv(team=team, rounds=rounds, binary=binary)  # noqa: E731
    settings = {**SMALL, "seed": seed, "output_dir": output_dir, **overrides}
    if kind in CRITIC_FREE:
        settings.pop("critic_learning_rate")
        settings.setdefault("num_generations", 1 if kind == "reinforce-pp" else 2)
        config_cls, trainer_cls = CRITIC_FREE[kind]
        return trainer_cls(policy, env_fn, config_cls(**settings), eval_env_fn=env_fn)
    config_cls, trainer_cls = {
        "action": (ActionMARFTConfig, ActionMARFTTrainer),
        "token": (TokenMARFTConfig, TokenMARFTTrainer),
        "ppo-action": (PPOConfig, PPOTrainer),
        "ppo-token": (PPOConfig, PPOTrainer),
    }[kind]
    if kind.startswith("ppo"):
        settings["level"] = kind.split("-")[1]
    critic = Critic(policy, seed=seed)
    return trainer_cls(policy, env_fn, config_cls(**settings), critic=critic, eval_env_fn=env_fn)


def adapter_params(trainer, agent):
    """The agent's adapter weights by name (empty for a frozen agent)."""
    policy = trainer.policy
    adapter = policy.adapter_name(agent)
    if adapter is None or not policy.trainable_parameters(agent):
        return {}
    named = policy.backbone(agent).named_adapter_parameters(adapter)
    return {name: p.detach().clone() for name, p in named}


def lora_pairs(params):
    """``{module: [lora_A weight, lora_B weight]}`` of named adapter weights."""
    pairs: dict[str, list[str]] = {}
    for name in params:
        for half in ("lora_A", "lora_B"):
            if f".{half}." in name:
                pairs.setdefault(name.split(f".{half}.")[0], []).append(name)
    assert pairs and all(len(names) == 2 for names in pairs.values()), sorted(params)
    return pairs


def changed(before, after):
    """Whether every LoRA A/B pair of an adapter moved (B starts at 0, so A moves only from the
    second step: a pair counts as moved when either half did); a critic's parameters: any."""
    if not isinstance(before, dict):
        return any(not torch.equal(a, b) for a, b in zip(before, list(after), strict=True))
    assert before.keys() == after.keys()
    return all(
        any(not torch.equal(before[n], after[n]) for n in names)
        for names in lora_pairs(before).values()
    )


def unchanged(before, after):
    """Whether no adapter weight moved at all."""
    assert before.keys() == after.keys()
    return all(torch.equal(before[n], after[n]) for n in before)


@pytest.mark.parametrize(
    ("kind", "team"),
    [
        ("action", 2),
        ("token", 2),
        ("ppo-action", 1),
        ("ppo-token", 1),
        ("grpo", 2),
        ("grpo", 1),
        ("rloo", 2),
        ("rloo", 1),
        ("reinforce-pp", 2),
        ("reinforce-pp", 1),
    ],
)
def test_trainer_runs_with_finite_losses_and_changes_parameters(kind, team, tiny_path):
    trainer = build(kind, tiny_path, team=team)
    before = {a: adapter_params(trainer, a) for a in trainer.agents}
    critic_before = (
        [p.detach().clone() for p in trainer.critic.parameters()] if trainer.critic else []
    )
    records = trainer.train()
    assert [r["iteration"] for r in records] == [0, 1, 2]
    for record in records[1:]:
        assert math.isfinite(record["train/policy_loss"])
        assert math.isfinite(record["train/entropy"])
        if trainer.critic is not None:
            assert math.isfinite(record["train/value_loss"])
    assert "eval/accuracy" in records[0] and "eval/accuracy" in records[-1]
    for agent in trainer.agents:
        assert changed(before[agent], adapter_params(trainer, agent)), agent
    if trainer.critic is not None:
        assert changed(critic_before, trainer.critic.parameters())


@pytest.mark.parametrize("kind", ["action", "token", "grpo", "rloo", "reinforce-pp"])
def test_rollout_and_update_log_probs_agree_before_the_first_step(kind, tiny_path):
    trainer = build(kind, tiny_path, iterations=1)
    (record,) = [r for r in trainer.train() if r["iteration"] == 1]
    # The rollouts' prompt tokens, run and saved (every trainer generates through the policy).
    assert record["rollout/prefill_tokens"] > 0 and record["rollout/prefill_tokens_saved"] >= 0
    assert record["train/prompt_tokens"] > 0 and record["train/prompt_tokens_saved"] >= 0
    # Measured on the first minibatch of the first epoch, before its optimizer step: ratio 1.
    assert record["train/approx_kl"] < 1e-8
    assert record["train/clip_fraction"] == 0.0


@pytest.mark.parametrize("kind", ["action", "grpo", "rloo", "reinforce-pp"])
def test_seeded_runs_repeat_exactly(kind, tiny_path):
    finals = []
    for _ in range(2):
        trainer = build(kind, tiny_path, seed=3)
        records = trainer.train()
        finals.append((adapter_params(trainer, "answerer"), records[-1]["rollout/reward_mean"]))
    assert unchanged(finals[0][0], finals[1][0])
    assert finals[0][1] == finals[1][1]


@pytest.mark.parametrize("kind", ["action", "grpo", "rloo", "reinforce-pp"])
def test_resume_continues_the_same_run(kind, tiny_path, tmp_path):
    straight = build(
        kind, tiny_path, iterations=3, seed=1, output_dir=str(tmp_path / "a"), checkpoint_every=1
    )
    straight.train()
    interrupted = build(
        kind, tiny_path, iterations=3, seed=1, output_dir=str(tmp_path / "b"), checkpoint_every=1
    )
    interrupted.config.iterations = 2  # stop early, as if killed after checkpoint-2
    interrupted.train()
    resumed = build(
        kind, tiny_path, iterations=3, seed=1, output_dir=str(tmp_path / "b"), checkpoint_every=1
    )
    resumed.resume()
    assert resumed.iteration == 2
    resumed.train()
    for agent in straight.agents:
        a, b = adapter_params(straight, agent), adapter_params(resumed, agent)
        assert a.keys() == b.keys()
        for name in a:
            assert torch.allclose(a[name], b[name], atol=1e-6), (agent, name)
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [0, 1, 2, 3]
    saved = json.loads((tmp_path / "b" / "config.json").read_text())
    assert saved["algorithm"] == straight.algorithm and saved["iterations"] == 3


def test_frozen_agent_does_not_change(tiny_path):
    trainer = build("action", tiny_path, specs={"writer": AgentSpec(trainable=False)})
    frozen = [p.detach().clone() for p in trainer.policy.parameters()]
    trained_before = adapter_params(trainer, "answerer")
    trainer.train()
    assert trainer.policy.trainable_parameters("writer") == []
    assert changed(trained_before, adapter_params(trainer, "answerer"))
    # The writer acts through the base model (or a frozen adapter) whose weights never move.
    assert set(trainer.optimizers) == {"answerer"} and trainer.critic_optimizer is not None
    assert len(frozen) > 0


def test_agent_by_agent_updates_cycle(tiny_path):
    trainer = build("action", tiny_path, iterations=1, agent_by_agent_interval=1)
    writer, answerer = adapter_params(trainer, "writer"), adapter_params(trainer, "answerer")
    records = trainer.train()
    assert records[-1]["train/agents"] == "writer"
    assert changed(writer, adapter_params(trainer, "writer"))
    assert unchanged(answerer, adapter_params(trainer, "answerer"))
    trainer.config.iterations = 2
    assert trainer.train()[-1]["train/agents"] == "answerer"


@pytest.mark.parametrize("kind", ["action", "token"])
def test_trust_region_cut_acts_at_paper_defaults_and_undoes_the_step(kind, tiny_path):
    # One epoch, one minibatch (paper defaults): the KL before the only step is 0, so a cut that
    # measured it there could never act. Measured after the step, a step past the limit is undone.
    trainer = build(kind, tiny_path, iterations=1, trust_region_kl=1e-12)
    before = adapter_params(trainer, "answerer")
    record = trainer.train()[-1]
    assert record["train/skipped_trust_region"] == 1
    assert record["train/approx_kl_after"] > 1e-12
    assert unchanged(before, adapter_params(trainer, "answerer"))
    # The optimizer state is rolled back too: Adam has taken no step.
    assert all(not state for state in trainer.optimizers["answerer"].state.values())
    loose = build(kind, tiny_path, iterations=1, trust_region_kl=10.0)
    before = adapter_params(loose, "answerer")
    record = loose.train()[-1]
    assert record["train/skipped_trust_region"] == 0 and 0 < record["train/approx_kl_after"] < 10.0
    assert changed(before, adapter_params(loose, "answerer"))


def test_non_finite_loss_skips_the_update_and_says_so(tiny_path, caplog, monkeypatch):
    trainer = build("action", tiny_path, iterations=1)
    before = adapter_params(trainer, "answerer")
    original = trainer.policy.token_log_probs

    def poisoned(*args, **kwargs):
        out = original(*args, **kwargs)
        return out._replace(log_probs=out.log_probs * float("nan"))

    monkeypatch.setattr(trainer.policy, "token_log_probs", poisoned)
    record = trainer.train()[-1]
    assert record["train/skipped_nonfinite"] >= 1
    assert unchanged(before, adapter_params(trainer, "answerer"))
    assert "Skipping a policy update" in caplog.text


def test_entropy_blowup_is_detected_and_rolled_back(tiny_path, caplog):
    trainer = build(
        "action", tiny_path, iterations=1, rollback_on_blowup=True, entropy_blowup_factor=2.0
    )
    for _ in range(3):
        trainer.guards.check_entropy({"train/entropy": 1.0}, trainer.iteration)
    good = adapter_params(trainer, "answerer")
    with torch.no_grad():
        for p in trainer.policy.trainable_parameters("answerer"):
            p.add_(1.0)
    metrics = {"train/entropy": 5.0}
    trainer.guards.check_entropy(metrics, trainer.iteration)
    assert metrics["train/entropy_blowup"] == 1 and metrics["train/rolled_back"] == 1
    assert unchanged(good, adapter_params(trainer, "answerer"))
    assert "Entropy blow-up" in caplog.text


def test_grpo_dynamic_sampling_drops_groups_without_signal(tiny_path, monkeypatch):
    trainer = build("grpo", tiny_path, iterations=1, dynamic_sampling=True, max_resample_rounds=1)
    original = trainer.collector.collect

    def collect(requests, settings=None):
        episodes = original(requests, settings)
        for e in episodes:
            if e.group % 2 == 0:  # even groups: make every reward equal
                e.team_return = 0.25
        return episodes

    monkeypatch.setattr(trainer.collector, "collect", collect)
    episodes, stats = trainer.collect_with_stats()
    assert episodes and all(e.group % 2 == 1 for e in episodes)
    assert stats["rollout/groups_dropped"] >= 1


def test_configs_reject_bad_settings_with_fixes():
    with pytest.raises(ValueError, match="multiple of num_generations"):
        GRPOConfig(episodes_per_iteration=10, num_generations=4)
    with pytest.raises(ValueError, match="num_minibatches=8 exceeds"):
        ActionMARFTConfig(episodes_per_iteration=4, num_minibatches=8)
    assert (
        ActionMARFTConfig().checkpoint_every == 1
    )  # every iteration by default, when output_dir is set
    with pytest.raises(
        ValueError, match=r"epsilon_high=0.1 is below epsilon=0.2.*set epsilon_high >= epsilon"
    ):
        GRPOConfig(epsilon=0.2, epsilon_high=0.1)
    with pytest.raises(ValueError, match=r"epsilon_high=0.1 is below epsilon=0.2"):
        ActionMARFTConfig(epsilon=0.2, epsilon_high=0.1)
    with pytest.raises(ValueError, match="logprob_normalization"):
        ActionMARFTConfig(logprob_normalization="chars")
    for bad in (0, -5, 1.5, True, "2048"):
        with pytest.raises(
            ValueError, match=rf"max_chunk_tokens must be a positive .* got {bad!r}"
        ):
            GRPOConfig(max_chunk_tokens=bad)
    assert ActionMARFTConfig(max_chunk_tokens=1).max_chunk_tokens == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: ActionMARFTConfig(gamma_token=0.9),
            r"gamma_token=0.9 only applies at token level.*TokenMARFTConfig",
        ),
        (
            lambda: ActionMARFTConfig(lam_token=0.5, gamma_token=0.8),
            r"gamma_token=0.8, lam_token=0.5 only applies at token level",
        ),
        (lambda: PPOConfig(level="action", lam_token=0.5), "lam_token=0.5 only applies"),
        (
            lambda: TokenMARFTConfig(logprob_normalization="word"),
            r"logprob_normalization='word' only applies at action level.*ActionMARFTConfig",
        ),
        (
            lambda: PPOConfig(level="token", logprob_normalization="token"),
            "logprob_normalization='token' only applies at action level",
        ),
        (
            lambda: ActionMARFTConfig(
                normalize_advantages=False, normalize_advantages_per_agent=True
            ),
            r"normalize_advantages_per_agent=True needs normalize_advantages=True",
        ),
        (
            lambda: GRPOConfig(episodes_per_iteration=4, num_generations=2, num_minibatches=8),
            "num_minibatches=8 exceeds episodes_per_iteration=4",
        ),
    ],
)
def test_settings_a_trainer_would_ignore_are_refused_with_the_fix(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_settings_of_the_trained_level_are_accepted():
    assert TokenMARFTConfig(gamma_token=0.9, lam_token=0.5).lam_token == 0.5
    assert PPOConfig(level="token", gamma_token=0.9).gamma_token == 0.9
    assert ActionMARFTConfig(logprob_normalization="word").logprob_normalization == "word"
    assert not ActionMARFTConfig(normalize_advantages=False).normalize_advantages


def test_ppo_refuses_teams_and_marft_needs_a_critic(tiny_path):
    with pytest.raises(ValueError, match="single-agent baseline"):
        build("ppo-action", tiny_path, team=2)
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"])
    with pytest.raises(ValueError, match="needs a critic"):
        ActionMARFTTrainer(policy, lambda: DigitsEnv(), ActionMARFTConfig(**SMALL), critic=None)


def _sequence_log_probs(policy, agent, decisions):
    with torch.no_grad():
        out = policy.token_log_probs(
            agent, [d.prompt_ids for d in decisions], [d.action_ids for d in decisions]
        )
    return (out.log_probs * out.mask).sum(1)  # (batch,)


@pytest.mark.parametrize("kind", ["action", "grpo"])
def test_an_update_makes_better_than_average_actions_more_likely(kind, tiny_path):
    # The defining property of a policy-gradient step: the change in each sampled action's
    # log-probability correlates with its advantage (sum of A * d log p > 0).
    extra = {"num_generations": 4} if kind == "grpo" else {}
    trainer = build(
        kind,
        tiny_path,
        team=1,
        iterations=1,
        episodes_per_iteration=16,
        rollout_threads=16,
        entropy_coef=0.0,
        **extra,
    )
    episodes = trainer.collect()
    decisions = [d for e in episodes for d in e.decisions]
    if kind == "grpo":
        advantages, _ = trainer.batch_advantages(episodes, trainer.rollout_batch(episodes))
    else:
        advantages = trainer.prepare_batch(episodes).advantages
    before = _sequence_log_probs(trainer.policy, "answerer", decisions)
    trainer.update(episodes)
    after = _sequence_log_probs(trainer.policy, "answerer", decisions)
    assert float((advantages * (after - before)).sum()) > 0


def test_grpo_reports_no_statistics_when_every_group_is_flat(tiny_path):
    # An all-equal batch trains nothing; reporting entropy 0 would poison the blow-up baseline.
    trainer = build("grpo", tiny_path, iterations=1)
    episodes = trainer.collect()
    for e in episodes:
        e.team_return = 0.0
    before = adapter_params(trainer, "answerer")
    metrics = trainer.update(episodes)
    assert metrics["train/skipped_empty"] == 1 and "train/entropy" not in metrics
    assert unchanged(before, adapter_params(trainer, "answerer"))


def test_sampled_evaluation_is_logged_beside_the_greedy_one(tiny_path):
    trainer = build("action", tiny_path, iterations=1, eval_sampled=True)
    records = trainer.train()
    for record in (records[0], records[-1]):
        assert "eval/accuracy" in record and "eval_sampled/accuracy" in record
        assert 0.0 <= record["eval_sampled/accuracy"] <= 1.0
    # Off by default: greedy only.
    plain = build("action", tiny_path, iterations=1).train()
    assert not any(key.startswith("eval_sampled/") for key in plain[0])


def test_a_rollout_backend_generates_and_is_synced_after_every_update(tiny_path):
    # The drop-in point for an inference engine: it generates the rollouts, the policy trains,
    # and the backend receives the policy after each update with a version number.
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)

    class Backend:
        def __init__(self):
            self.calls, self.synced = 0, []

        def generate(self, agent, messages_batch, settings, *, generator=None):
            self.calls += 1
            return policy.generate(agent, messages_batch, settings, generator=generator)

        def sync_adapters(self, policy, version):
            self.synced.append(version)

    from marft_algos.protocols import RolloutBackend

    backend = Backend()
    assert isinstance(backend, RolloutBackend)
    config = ActionMARFTConfig(**{**SMALL, "iterations": 2})
    trainer = ActionMARFTTrainer(
        policy,
        lambda: DigitsEnv(team=2),
        config,
        critic=Critic(policy, seed=0),
        rollout_backend=backend,
    )
    trainer.train()
    assert backend.calls > 0 and backend.synced == [1, 2]


def test_a_backend_that_can_sleep_sleeps_through_every_update_and_evaluation(tiny_path):
    # An engine's weights and KV cache need not stay in GPU memory while the policy trains.
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    events: list[str] = []

    class Backend:
        def generate(self, agent, messages_batch, settings, *, generator=None):
            events.append("generate")
            return policy.generate(agent, messages_batch, settings, generator=generator)

        def sync_adapters(self, policy, version):
            events.append("sync")

        def sleep(self):
            events.append("sleep")

    class Recording(ActionMARFTTrainer):
        def update(self, episodes):
            events.append("update")
            return super().update(episodes)

        def evaluate(self):
            out = super().evaluate()
            events.append("evaluated")
            return out

    config = ActionMARFTConfig(**{**SMALL, "iterations": 2, "eval_every": 1})
    trainer = Recording(
        policy,
        lambda: DigitsEnv(team=2),
        config,
        critic=Critic(policy, seed=0),
        eval_env_fn=lambda: DigitsEnv(team=2),
        rollout_backend=Backend(),
    )
    trainer.train()
    compact = [e for i, e in enumerate(events) if e != "generate" or events[i - 1] != "generate"]
    assert compact.count("update") == 2 and compact.count("evaluated") >= 2
    for i, event in enumerate(compact):
        if event in ("update", "evaluated"):
            # The engine was put to sleep after its last generation and before this phase.
            last = max((j for j in range(i) if compact[j] in ("generate", "sync")), default=-1)
            assert "sleep" in compact[last + 1 : i], compact


def test_more_processes_than_work_is_refused_before_anything_runs(tiny_path):
    from marft_algos.distributed import DistributedContext

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    config = GRPOConfig(
        **{**{k: v for k, v in SMALL.items() if k != "critic_learning_rate"}, "num_generations": 2}
    )
    with pytest.raises(ValueError, match="4 processes share 2 groups per iteration"):
        GRPOTrainer(
            policy,
            lambda: DigitsEnv(),
            config,
            distributed=DistributedContext(rank=0, world_size=4),
        )


def test_a_subclass_overriding_collect_with_stats_trains_on_its_episodes(tiny_path):
    seen = []

    class Recording(ActionMARFTTrainer):
        def collect_with_stats(self):
            episodes, stats = super().collect_with_stats()
            seen.append(len(episodes))
            return episodes, {**stats, "rollout/recorded": len(episodes)}

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    trainer = Recording(
        policy,
        lambda: DigitsEnv(team=2),
        ActionMARFTConfig(**{**SMALL, "iterations": 1}),
        critic=Critic(policy, seed=0),
    )
    record = trainer.train()[-1]
    assert seen == [SMALL["episodes_per_iteration"]]
    assert record["rollout/recorded"] == SMALL["episodes_per_iteration"]


@pytest.mark.parametrize("skip", [True, False])
def test_grpo_runs_every_completion_through_the_update_unless_skipping_zero_advantages(
    skip, tiny_path
):
    trainer = build("grpo", tiny_path, team=1, iterations=1, skip_zero_advantages=skip)
    rows: list[int] = []
    token_log_probs = trainer.policy.token_log_probs

    def counting(agent, prompt_ids, action_ids, **kwargs):
        if torch.is_grad_enabled():
            rows.append(len(prompt_ids))
        return token_log_probs(agent, prompt_ids, action_ids, **kwargs)

    trainer.policy.token_log_probs = counting
    episodes, _ = trainer.collect_with_stats()
    # The first group's rewards made equal: its advantages are 0.
    batch = trainer.rollout_batch(episodes)
    advantages, _ = trainer.batch_advantages(episodes, batch)
    first_group = torch.tensor([episodes[int(r)].group == episodes[0].group for r in batch.episode])
    advantages = torch.where(first_group, torch.zeros_like(advantages), advantages)
    trainer.batch_advantages = lambda _episodes, _batch: (advantages, {})
    trainer.update(episodes)
    informative = int((advantages != 0).sum())
    assert 0 < informative < len(episodes)
    assert sum(rows) == (informative if skip else len(episodes))


@pytest.mark.parametrize(
    "kind",
    [
        "action",
        "token",
        "grpo",
        # The same shared forward as the trainers above (PPO: action MARFT's update on one agent;
        # RLOO, REINFORCE++: GRPO's): -m slow (the suite's time).
        pytest.param("ppo-action", marks=pytest.mark.slow),
        pytest.param("rloo", marks=pytest.mark.slow),
        pytest.param("reinforce-pp", marks=pytest.mark.slow),
    ],
)
def test_every_trainer_shares_prompt_beginnings_with_the_unshared_result(kind, tiny_path):
    # The same seeded run with prompts' shared beginnings run once (the default, in rollouts
    # and updates, with the prefix store) and with every prompt run from its first token.
    finals, saved = [], []
    for share in (True, False):
        trainer = build(kind, tiny_path, team=1 if kind.startswith("ppo") else 2, seed=1)
        if not share:
            trainer.policy.shared_prefix_tokens, trainer.policy.prefix_store_tokens = None, 0
        records = trainer.train()
        saved.append(sum(r.get("rollout/prefill_tokens_saved", 0) for r in records))
        finals.append({a: adapter_params(trainer, a) for a in trainer.agents})
    assert saved[0] > saved[1]  # the beginnings were shared
    # Adam divides by the root of the squared gradients, so a gradient's float round-off in an
    # entry whose gradient is near 0 moves it by up to a sizeable part of a step (lr 5e-3): the
    # bound is 1% of one step; a wrong prefix would move weights by whole steps.
    for agent, params in finals[0].items():
        for name, value in params.items():
            torch.testing.assert_close(value, finals[1][agent][name], atol=5e-5, rtol=0)
