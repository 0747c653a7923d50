"""marft_algos.rollout.attribution: which agent's tuning moved the team, on a scripted team whose
answer is known (A's tuning adds exactly 10 points, B's nothing, C's costs 5)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from marft_algos.policy.multi_agent import Generation
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.attribution import (
    SettingsPolicy,
    attribution_rows,
    attribution_settings,
    collect_settings,
)
from marft_algos.rollout.collector import EpisodeRequest, RolloutCollector
from marft_envs import AgentProfile, FlexPOMDPEnv, Transition

GREEDY = GenerationSettings(max_new_tokens=4, do_sample=False)
EPISODES = 20


class ScriptedTeam(FlexPOMDPEnv):
    """A, B, C each say "tuned" or "base". Episodes 0-9 are right whatever they say, except that
    C saying "tuned" breaks episode 0; episodes 10 and 11 are right only when A says "tuned"."""

    def __init__(self) -> None:
        super().__init__([AgentProfile(a, f"You are {a}.") for a in "ABC"], credit="team")

    def _reset_task(self, options: dict[str, Any]) -> None:
        self.index = int(options["index"])

    def _observation(self, agent: str) -> str:
        return f"Episode {self.index}."

    def _transition(self, actions: dict[str, str]) -> Transition:
        i = self.index
        correct = i < 10
        if i == 0 and actions["C"] == "tuned":
            correct = False
        if i in (10, 11):
            correct = actions["A"] == "tuned"
        return Transition(reward=float(correct), terminated=True, info={"correct": correct})


class FlagPolicy:
    """Says "tuned" unless the agent is untuned (no model): what an agent's tuning changes."""

    agents = ["A", "B", "C"]

    def __init__(self) -> None:
        self.off: set[str] = set()
        self.calls: dict[tuple[str, bool], int] = {}

    @contextlib.contextmanager
    def untuned(self, agents: list[str]) -> Iterator[None]:
        self.off |= set(agents)
        try:
            yield
        finally:
            self.off -= set(agents)

    def generate(self, agent, messages_batch, settings, *, generator=None) -> list[Generation]:
        tuned = agent not in self.off
        key = (agent, tuned)
        self.calls[key] = self.calls.get(key, 0) + len(messages_batch)
        text = "tuned" if tuned else "base"
        return [Generation([1], [2], [-0.5], text, True, agent) for _ in messages_batch]


def _run() -> tuple[list[dict[str, Any]], FlagPolicy]:
    raw = FlagPolicy()
    policy = SettingsPolicy(raw)
    collector = RolloutCollector.from_factory(policy, ScriptedTeam, 4, GREEDY)
    requests = [EpisodeRequest(seed=i, options={"index": i}) for i in range(EPISODES)]
    settings = attribution_settings(raw.agents)
    episodes = collect_settings(policy, lambda: collector.collect(requests), settings)
    return attribution_rows(settings, episodes), raw


def test_the_table_names_the_agent_that_moved_the_team() -> None:
    rows, _ = _run()
    by_name = {r["setting"]: r for r in rows}
    assert list(by_name) == [
        "all tuned",
        "all untuned",
        "A reverted",
        "B reverted",
        "C reverted",
        "A alone tuned",
        "B alone tuned",
        "C alone tuned",
    ]  # 2n + 2 settings
    assert by_name["all tuned"]["accuracy"] == pytest.approx(11 / 20)
    assert by_name["all untuned"]["accuracy"] == pytest.approx(10 / 20)
    # Reverting A costs its 10 points, B nothing, C's reversion gains the 5 its tuning cost.
    diff = {k: round(100 * r["accuracy_difference"], 6) for k, r in by_name.items()}
    assert diff["A reverted"] == -10 and diff["B reverted"] == 0 and diff["C reverted"] == 5
    assert diff["A alone tuned"] == 5  # +10 from A, and C's -5 gone
    assert diff["B alone tuned"] == -5 and diff["C alone tuned"] == -10
    a = by_name["A reverted"]
    assert (a["wrong_to_right"], a["right_to_wrong"]) == (0, 2)
    # d = -1 on 2 of 20 episodes: var = 0.1 - 0.01, paired SE √(0.09/20).
    assert a["accuracy_difference_se"] == pytest.approx((0.09 / 20) ** 0.5)
    assert a["p_value"] == pytest.approx(0.5)  # McNemar: 2 · (1/2)²
    assert by_name["B reverted"]["accuracy_difference_se"] == 0.0
    assert a["reward_difference"] == pytest.approx(-0.1)  # team return: 1 per solved episode


def test_greedy_generations_are_reused_across_settings() -> None:
    _, raw = _run()
    # An agent runs once per episode, adapter state and distinct observation (which holds the
    # earlier agents' messages): A reads 1 per episode, B 2 (A tuned or not), C 4; without reuse
    # each would run in all 8 settings.
    expected = {"A": 1, "B": 2, "C": 4}
    assert raw.calls == {
        (a, tuned): EPISODES * expected[a] for a in "ABC" for tuned in (True, False)
    }


def test_two_agents_have_four_distinct_settings() -> None:
    names = [s.name for s in attribution_settings(["reasoner", "actor"])]
    assert names == [
        "all tuned",
        "all untuned",
        "reasoner reverted = actor alone tuned",
        "actor reverted = reasoner alone tuned",
    ]


def test_an_untuned_agent_acts_with_the_base_model_and_the_others_keep_their_adapters(
    tiny_path,
) -> None:
    import torch

    from marft_algos.policy import MultiAgentPolicy

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["reasoner", "actor"], seed=0)
    with torch.no_grad():  # trained adapters: LoRA B away from its zero start
        for agent in policy.agents:
            for name, p in policy.backbone(agent).model.named_parameters():
                if f"lora_B.{agent}." in name:
                    p.normal_(0, 0.5)
    messages = [[{"role": "user", "content": "Problem: 3 + 4"}]]

    def log_probs(agent: str) -> list[float]:
        return list(policy.generate(agent, messages, GREEDY)[0].log_probs)

    def reference(agent: str, gen) -> list[float]:
        out = policy.token_log_probs(agent, [gen.prompt_ids], [gen.action_ids], reference=True)
        return out.log_probs[0].tolist()

    tuned = {a: log_probs(a) for a in policy.agents}
    with policy.untuned(["actor"]):
        base = policy.generate("actor", messages, GREEDY)[0]
        assert log_probs("reasoner") == tuned["reasoner"]  # not untuned: its adapter stays
    assert list(base.log_probs) == pytest.approx(reference("actor", base), abs=1e-5)
    assert list(base.log_probs) != pytest.approx(tuned["actor"], abs=1e-3)
    assert log_probs("actor") == tuned["actor"]  # restored after the block


def test_failed_episodes_leave_the_reward_means_and_are_counted() -> None:
    from types import SimpleNamespace

    def episode(index: int, ret: float, error: str | None = None) -> Any:
        info = {"correct": ret > 0, "calls": {"A": 1}}
        if error:
            info["program_error"] = {"type": error}
        return SimpleNamespace(seed=index, options={"index": index}, team_return=ret, info=info)

    tuned = [episode(0, 1.0), episode(1, 0.0), episode(2, -1.0, "Timeout")]
    untuned = [episode(0, 0.0), episode(1, 0.0, "ValueError"), episode(2, 1.0)]
    settings = attribution_settings(["A"])[:2]
    rows = attribution_rows(settings, {frozenset(): tuned, frozenset({"A"}): untuned})
    assert [r["episodes_failed"] for r in rows] == [1, 1]
    assert rows[0]["reward_mean"] == pytest.approx(0.5)  # (1 + 0) / 2, not (1 + 0 - 1) / 3
    assert rows[1]["reward_mean"] == pytest.approx(0.5)  # (0 + 1) / 2
    # Paired over episode 0 alone, the only one that finished in both settings: 0 - 1.
    assert rows[1]["reward_difference"] == pytest.approx(-1.0)
    assert rows[1]["reward_difference_se"] == 0.0
