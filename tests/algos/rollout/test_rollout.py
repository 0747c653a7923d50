"""The rollout collector: batching by agent, reward placement, round and episode markers."""

from __future__ import annotations

from typing import NamedTuple

import pytest

import marft_envs
from marft_algos.rollout.collector import EpisodeRequest, GenerationSettings, RolloutCollector


class Gen(NamedTuple):
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool


class ScriptedPolicy:
    """Copies what it sees (so relays succeed) and records every generate call."""

    def __init__(self, reply=None):
        self.calls: list[tuple[str, int]] = []
        self.reply = reply or (lambda agent, messages: messages[-1]["content"])

    def generate(self, agent, messages_batch, settings, *, generator=None):
        self.calls.append((agent, len(messages_batch)))
        out = []
        for messages in messages_batch:
            text = self.reply(agent, messages)
            out.append(Gen([len(text)], [1, 2, 3], [-0.1, -0.2, -0.3], text, True))
        return out


def test_every_copy_waiting_on_an_agent_is_generated_in_one_call():
    policy = ScriptedPolicy()
    collector = RolloutCollector.from_factory(
        policy, lambda: marft_envs.make("relay-v0", n_agents=3), 4
    )
    episodes = collector.collect(4)
    assert policy.calls == [("scout", 4), ("messenger_1", 4), ("reporter", 4)]
    for episode in episodes:
        assert [d.agent for d in episode.decisions] == ["scout", "messenger_1", "reporter"]
        assert [d.turn for d in episode.decisions] == [0, 1, 2]
        # Chain visibility lets the copied text carry the code: every relay succeeds.
        assert [d.reward for d in episode.decisions] == [0.0, 0.0, 1.0]
        assert [d.round_end for d in episode.decisions] == [False, False, True]
        assert all(d.done and not d.truncated for d in episode.decisions)
        assert episode.team_return == 1.0 and episode.info["correct"] is True
        assert episode.decisions[0].action_ids == [1, 2, 3]


def test_more_episodes_than_env_copies_and_multi_round_episodes():
    policy = ScriptedPolicy(lambda agent, messages: "no idea")
    collector = RolloutCollector.from_factory(
        policy, lambda: marft_envs.make("relay-v0", horizon=3), 2
    )
    episodes = collector.collect(5)
    assert len(episodes) == 5
    for episode in episodes:
        assert [d.timestep for d in episode.decisions] == [0, 0, 1, 1, 2, 2]
        assert [d.round_end for d in episode.decisions] == [False, True] * 3
        assert [d.done for d in episode.decisions] == [False, False, False, False, True, True]
        assert all(d.truncated == d.done for d in episode.decisions)  # horizon reached: truncation
        assert episode.team_return == 0.0


def test_dynamic_turn_order_comes_from_the_env():
    def reply(agent, messages):
        text = messages[-1]["content"]
        if agent == "dispatcher":
            return "calculator" if "+" in text else "speller"
        return "42"

    policy = ScriptedPolicy(reply)
    collector = RolloutCollector.from_factory(
        policy, lambda: marft_envs.make("dispatch-v0"), 8, seed=1
    )
    episodes = collector.collect(8)
    routed = {e.decisions[1].agent for e in episodes}
    assert routed == {"calculator", "speller"}  # both routes occur across copies
    assert policy.calls[0] == ("dispatcher", 8)
    assert sum(n for agent, n in policy.calls if agent != "dispatcher") == 8


def test_requests_with_equal_seeds_face_the_same_task_and_keep_their_order():
    policy = ScriptedPolicy(lambda agent, messages: messages[-1]["content"])
    collector = RolloutCollector.from_factory(policy, lambda: marft_envs.make("relay-v0"), 3)
    requests = [EpisodeRequest(seed=s, group=g) for g, s in enumerate([7, 7, 9, 7])]
    episodes = collector.collect(requests)
    scout_views = [e.decisions[0].text for e in episodes]
    assert scout_views[0] == scout_views[1] == scout_views[3] != scout_views[2]
    assert [e.group for e in episodes] == [0, 1, 2, 3]
    assert [e.seed for e in episodes] == [7, 7, 9, 7]


def test_collector_seed_reproduces_episode_seeds():
    seeds = []
    for _ in range(2):
        collector = RolloutCollector.from_factory(
            ScriptedPolicy(), lambda: marft_envs.make("relay-v0"), 2, seed=3
        )
        seeds.append([e.seed for e in collector.collect(4)])
    assert seeds[0] == seeds[1]


def test_settings_reach_the_policy():
    seen = {}

    class Recording(ScriptedPolicy):
        def generate(self, agent, messages_batch, settings, *, generator=None):
            seen.update(settings=settings, generator=generator)
            return super().generate(agent, messages_batch, settings, generator=generator)

    collector = RolloutCollector.from_factory(Recording(), lambda: marft_envs.make("relay-v0"), 1)
    settings = GenerationSettings(max_new_tokens=7, do_sample=False, temperature=0.5)
    collector.collect(1, settings)
    assert seen["settings"] is settings and seen["generator"] is collector.generator


def test_non_flex_envs_are_rejected_clearly():
    from pettingzoo import AECEnv

    class Plain(AECEnv):
        possible_agents = ["a"]

    with pytest.raises(TypeError, match="FlexPOMDPEnv"):
        RolloutCollector(ScriptedPolicy(), [Plain()])


def test_settings_with_a_seed_are_refused_naming_the_collector_seed():
    factory = lambda: marft_envs.make("relay-v0")  # noqa: E731
    with pytest.raises(ValueError, match=r"seed=5.*RolloutCollector\(seed=\.\.\.\)"):
        RolloutCollector.from_factory(ScriptedPolicy(), factory, 1, GenerationSettings(seed=5))
    collector = RolloutCollector.from_factory(ScriptedPolicy(), factory, 1)
    with pytest.raises(ValueError, match="seed=5"):
        collector.collect(1, GenerationSettings(seed=5))
