"""Agent programs branch by replay: continuations replay the recorded prefix in fresh env copies
(in process, over HTTP, in a child process), a program that does not repeat itself is named with
its first differing call and its episode dropped, and a program that raises in one branch drops
that branch only."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from marft_algos.rollout.branching import EnvNotCopyable, copy_env
from marft_algos.rollout.collector import (
    EpisodeRequest,
    GenerationSettings,
    ProgramFailures,
    RolloutCollector,
)
from marft_algos.rollout.replay_branching import ReplayBranchingCollector, branching_around
from marft_algos.trainers.branched import without_copies
from marft_envs.programs import ProgramEnv
from marft_envs.programs.replay import MISMATCH

AGENTS = ["planner", "router", "solver"]
BRANCH = {"router": {"width": 2, "rollouts": 2}}


@dataclass
class _Generation:
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool = True


class CountingPolicy:
    """Router alternatives from ``routes`` by their place in the batch; every other reply numbers
    the generations so far, so each live call gets a new text and a replayed one would not."""

    agents = AGENTS

    def __init__(self, routes=("left", "right")):
        self.routes = routes
        self.generated = {a: 0 for a in AGENTS}

    def generate(self, agent, messages_batch, settings, *, generator):
        out = []
        for k, _ in enumerate(messages_batch):
            self.generated[agent] += 1
            n = self.generated[agent]
            text = self.routes[k % len(self.routes)] if agent == "router" else f"{agent}-{n}"
            out.append(_Generation([n], [n, len(text)], [-0.5, -0.25], text))
        return out


def team(task, client):
    """planner -> router -> solver; the router's reply picks the solver's question."""
    plan = client.chat.completions.create(
        model="planner", messages=[{"role": "user", "content": f"Plan {task}"}]
    )
    hint = int(client.rng.integers(100))  # seeded: replays draw the same
    route = client.chat.completions.create(
        model="router",
        messages=[
            {"role": "system", "content": "Route."},
            {"role": "user", "content": f"{plan.choices[0].message.content} #{hint}"},
        ],
    )
    text = route.choices[0].message.content
    if text == "boom":
        raise RuntimeError("the program failed after the branch")
    client.chat.completions.create(
        model="solver", messages=[{"role": "user", "content": f"Solve via {text}"}]
    )
    return 1.0 if text == "right" else 0.0


def unseeded(task, client):
    """Draws from the global random module: a replay asks another question."""
    client.chat.completions.create(
        model="planner", messages=[{"role": "user", "content": f"Plan {task} {random.random()}"}]
    )
    client.chat.completions.create(model="router", messages=[{"role": "user", "content": "Go"}])
    return 0.0


def _collector(program, policy, *, n_envs=1, **settings):
    make = lambda: ProgramEnv(program, AGENTS, ["a", "b", "c"], **settings)  # noqa: E731
    plain = RolloutCollector(policy, [make() for _ in range(n_envs)], GenerationSettings(), seed=0)
    return branching_around(plain, BRANCH, make)


@pytest.mark.parametrize(
    "settings",
    [{}, {"transport": "http"}, {"isolation": "process"}],
    ids=["inprocess", "http", "process"],
)
def test_continuations_replay_the_prefix_and_split_at_the_branch(settings):
    if settings.get("transport") == "http":
        pytest.importorskip("uvicorn")
    policy = CountingPolicy()
    collector = _collector(team, policy, n_envs=2, **settings)
    assert isinstance(collector, ReplayBranchingCollector)
    try:
        episodes = collector.collect([EpisodeRequest(seed=s) for s in (3, 4)])
    finally:
        collector.close()
    # The prefix (one planner call per tree) and the router's 2 alternatives were generated once.
    assert policy.generated == {"planner": 2, "router": 4, "solver": 8}
    assert [e.branch for e in episodes[:4]] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    for tree in (episodes[:4], episodes[4:]):
        assert all("program_error" not in e.info for e in tree)
        plans = [e.decisions[0] for e in tree]
        assert {d.text for d in plans} == {plans[0].text}
        assert [d.branch_copy for d in plans] == [False, True, True, True]
        routes = [e.decisions[1] for e in tree]
        assert [d.text for d in routes] == ["left", "left", "right", "right"]
        assert [d.branch_copy for d in routes] == [False, True, False, True]
        assert routes[0].messages == routes[3].messages  # the same request, replayed
        assert len({e.decisions[2].text for e in tree}) == 4  # each continuation live
        assert [e.team_return for e in tree] == [0.0, 0.0, 1.0, 1.0]
    assert [len(e.decisions) for e in without_copies(episodes)[:4]] == [3, 1, 2, 1]


def test_a_program_that_does_not_repeat_itself_is_named_with_its_first_differing_call():
    collector = _collector(unseeded, CountingPolicy(), max_error_share=1.0)
    try:
        episodes = collector.collect([EpisodeRequest(seed=0)])
        assert [e.branch for e in episodes] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
        assert "program_error" not in episodes[0].info
        for e in episodes[1:]:  # every replayed copy: dropped, whatever on_error says
            error = e.info["program_error"]
            assert e.info["drop"] is True and error["type"] == MISMATCH
            assert (error["agent"], error["call"]) == ("planner", 0)
            message = error["message"]
            assert "\n" not in message
            assert message.startswith("unseeded did not repeat itself when replayed with seed 0")
            assert "call 0 (agent 'planner') differed: message 0 (user) content at character" in (
                message
            )
            assert "client.rng" in message
        # Under the default max_error_share the rollout stops, naming it.
        strict = _collector(unseeded, CountingPolicy())
        with pytest.raises(ProgramFailures, match="ReplayMismatch: unseeded did not repeat"):
            strict.collect([EpisodeRequest(seed=0)])
        strict.close()
    finally:
        collector.close()


def test_a_program_that_ends_early_on_replay_is_named():
    ended = iter([False, True, True, True])

    def flaky(task, client):
        client.chat.completions.create(model="planner", messages=[{"role": "user", "content": "P"}])
        if next(ended):
            return 0.0
        client.chat.completions.create(model="router", messages=[{"role": "user", "content": "R"}])
        return 1.0

    collector = _collector(flaky, CountingPolicy(), max_error_share=1.0)
    try:
        episodes = collector.collect([EpisodeRequest(seed=0)])
    finally:
        collector.close()
    messages = [e.info["program_error"]["message"] for e in episodes[1:]]
    assert all(
        "the episode ended before call 1 (recorded for agent 'router')" in m for m in messages
    )


@pytest.mark.parametrize("routes", [("left", "boom"), ("boom", "right")])
def test_a_program_that_raises_in_one_branch_drops_that_branch_only(routes):
    collector = _collector(team, CountingPolicy(routes), max_error_share=1.0)
    try:
        episodes = collector.collect([EpisodeRequest(seed=1)])
    finally:
        collector.close()
    failed = [e.branch[1] for e in episodes if "program_error" in e.info]
    bad = routes.index("boom")
    assert failed == [bad, bad]  # both continuations of the failing alternative, nothing else
    assert all(
        e.info["program_error"]["type"] == "RuntimeError" for e in episodes if e.branch[1] == bad
    )
    kept = [e for e in episodes if not e.info.get("drop")]
    assert len(kept) == 2
    # The planner's shared decision is held (not a copy) by exactly one kept episode, even when
    # the episode that first held it failed.
    held = [d for e in kept for d in e.decisions if d.agent == "planner" and not d.branch_copy]
    assert len(held) == 1
    routers = [d for e in kept for d in e.decisions if d.agent == "router" and not d.branch_copy]
    assert len(routers) == 1


def test_a_program_env_is_not_copied_and_its_replay_needs_make_env():
    env = ProgramEnv(team, AGENTS, ["a"])
    try:
        with pytest.raises(EnvNotCopyable, match="ReplayBranchingCollector"):
            copy_env(env)
        plain = RolloutCollector(CountingPolicy(), [env], GenerationSettings())
        with pytest.raises(ValueError, match="needs make_env"):
            branching_around(plain, BRANCH)
    finally:
        env.close()


def test_nested_branch_points_replay_everything_before_them():
    policy = CountingPolicy()
    make = lambda: ProgramEnv(team, AGENTS, ["a"])  # noqa: E731
    plain = RolloutCollector(policy, [make()], GenerationSettings(), seed=0)
    nested = {"router": {"width": 2, "rollouts": 1}, "solver": {"width": 2, "rollouts": 1}}
    collector = branching_around(plain, nested, make)
    try:
        episodes = collector.collect([EpisodeRequest(seed=2)])
    finally:
        collector.close()
    assert policy.generated == {"planner": 1, "router": 2, "solver": 4}
    assert [e.branch for e in episodes] == [(0, w1, 0, w2, 0) for w1 in range(2) for w2 in range(2)]
    assert [[d.text for d in e.decisions] for e in episodes] == [
        ["planner-1", "left", "solver-1"],
        ["planner-1", "left", "solver-2"],
        ["planner-1", "right", "solver-3"],
        ["planner-1", "right", "solver-4"],
    ]
    assert [len(e.decisions) for e in without_copies(episodes)] == [3, 1, 2, 1]
    assert [e.team_return for e in episodes] == [0.0, 0.0, 1.0, 1.0]
