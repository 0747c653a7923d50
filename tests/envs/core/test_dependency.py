"""Dependency functions decide turn order and visibility; agents see exactly what D shows them."""

from __future__ import annotations

import numpy as np
import pytest

from marft_envs import (
    DAG,
    AgentProfile,
    Chain,
    DependencyFunction,
    FlexPOMDPEnv,
    Independent,
    Orchestrator,
    RoundState,
    Router,
    Transition,
    Turn,
)

TEAM = ["a", "b", "c", "d"]


class Probe(FlexPOMDPEnv):
    """Each agent's action is a unique token; the task checks nothing and rewards nothing."""

    def _reset_task(self, options):
        pass

    def _observation(self, agent):
        return f"t={self.timestep} you={agent}"

    def _transition(self, actions):
        return Transition(reward=0.0)


def probe(dependency: DependencyFunction, team=TEAM, horizon: int = 3) -> Probe:
    return Probe([AgentProfile(r, f"profile of {r}") for r in team], dependency, horizon=horizon)


def play(env: Probe, seed: int = 0):
    """Run one episode; return per-round lists of (agent, visible tokens in its observation, infos)."""
    env.reset(seed=seed)
    rounds: dict[int, list] = {}
    for agent in env.agent_iter():
        obs, _, term, trunc, info = env.last()
        if term or trunc:
            env.step(None)
            continue
        t = env.timestep
        user = obs["messages"][-1]["content"]
        seen_tokens = {a for a in env.possible_agents if f"ACT<{a}@{t}>" in user}
        rounds.setdefault(t, []).append((agent, seen_tokens, list(info["visible_agents"])))
        assert obs["messages"][0] == {"role": "system", "content": f"profile of {agent}"}
        env.step(f"ACT<{agent}@{t}>")
    return rounds


def expected_visibility(parents: dict[str, tuple[str, ...]]):
    return {agent: set(ps) for agent, ps in parents.items()}


@pytest.mark.parametrize(
    ("dependency", "order", "sees"),
    [
        (Chain(), TEAM, {"a": set(), "b": {"a"}, "c": {"a", "b"}, "d": {"a", "b", "c"}}),
        (
            Chain(["d", "c", "b", "a"]),
            ["d", "c", "b", "a"],
            {"d": set(), "c": {"d"}, "b": {"d", "c"}, "a": {"d", "c", "b"}},
        ),
        (Chain(window=1), TEAM, {"a": set(), "b": {"a"}, "c": {"b"}, "d": {"c"}}),
        (Independent(), TEAM, {key: set() for key in TEAM}),
        (
            DAG({"b": ["a"], "c": ["a"], "d": ["b", "c"]}),
            ["a", "b", "c", "d"],
            {"a": set(), "b": {"a"}, "c": {"a"}, "d": {"b", "c"}},
        ),
        (
            DAG({"a": ["d"], "b": ["a"], "c": []}, transitive=True),
            ["c", "d", "a", "b"],
            {"c": set(), "d": set(), "a": {"d"}, "b": {"a", "d"}},
        ),
    ],
    ids=["chain", "chain-reversed", "chain-window", "independent", "dag", "dag-transitive"],
)
def test_static_dependency_functions_show_exactly_the_permitted_actions(dependency, order, sees):
    rounds = play(probe(dependency))
    assert len(rounds) == 3
    for turns in rounds.values():
        assert [agent for agent, _, _ in turns] == order
        for agent, seen_tokens, visible_info in turns:
            # Sees every action D shows it, and nothing D hides.
            assert seen_tokens == sees[agent]
            assert set(visible_info) == sees[agent]


def test_actions_from_earlier_rounds_are_not_leaked_by_the_base():
    rounds = play(probe(Chain(), horizon=2))
    for _agent, seen, _ in rounds[1]:
        # Round-1 observations carry only round-1 actions of predecessors, never round-0 tokens.
        assert all("@1" in f"ACT<{a}@1>" for a in seen)
    env = probe(Chain(), horizon=2)
    env.reset(seed=0)
    for _ in range(4):
        env.step(f"round0-secret-of-{env.agent_selection}")
    user = env.observe(env.agent_selection)["messages"][-1]["content"]
    assert "round0-secret" not in user


def test_dependency_matrix_matches_the_turns():
    env = probe(DAG({"b": ["a"], "c": ["a"], "d": ["b", "c"]}), horizon=1)
    env.reset(seed=0)
    for _ in range(3):
        env.step("x")
    matrix = env.round_state.dependency_matrix()
    expected = np.zeros((4, 4), dtype=np.int8)
    # d's turn is scheduled (it is the agent to act), so its edges are part of D_t already.
    for parent, child in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
        expected[TEAM.index(parent), TEAM.index(child)] = 1
    assert (matrix == expected).all()
    env.step("x")
    full = env.history[-1]
    assert [t.agent for t in full.turns] == ["a", "b", "c", "d"]


def test_router_changes_the_order_every_round_and_mid_round():
    def choose(state: RoundState):
        # Round-dependent start; the second agent is picked by the first agent's output.
        if not state.actions:
            return TEAM[state.timestep % 4]
        if len(state.actions) == 1:
            first = state.actions[0][1]
            return "d" if "go-d" in first else "b" if state.acted[0] != "b" else "c"
        return None

    env = probe(Router(choose), horizon=4)
    env.reset(seed=0)
    orders = []
    for t in range(4):
        first = env.agent_selection
        env.step("go-d" if t % 2 == 0 and first != "d" else "stay")
        second = env.agent_selection
        obs = env.observe(second)["messages"][-1]["content"]
        assert "go-d" in obs or "stay" in obs  # visibility "all": it sees the first action
        env.step("done")
        orders.append((first, second))
    assert orders == [("a", "d"), ("b", "c"), ("c", "d"), ("d", "b")]


def test_router_visibility_last_hides_earlier_agents():
    order = ["a", "b", "c"]
    env = probe(
        Router(lambda s: order[len(s.actions)] if len(s.actions) < 3 else None, visibility="last")
    )
    rounds = play(env)
    assert [(a, seen) for a, seen, _ in rounds[0]] == [("a", set()), ("b", {"a"}), ("c", {"b"})]


def test_orchestrator_routes_by_name_and_unrouted_specialists_do_not_act():
    team = ["boss", "coder", "writer", "editor"]
    dependency = Orchestrator("boss", ["coder", "writer"], finisher="editor")
    env = probe(dependency, team=team, horizon=2)
    env.reset(seed=0)
    env.step("This is for the WRITER, not the coder.")
    assert env.agent_selection == "writer"
    assert env.infos["writer"]["visible_agents"] == ["boss"]
    env.step("draft")
    assert env.agent_selection == "editor"
    assert env.infos["editor"]["visible_agents"] == ["boss", "writer"]
    env.step("final")
    assert env.history[-1].info == {} and [a for a, _ in env.history[-1].actions] == [
        "boss",
        "writer",
        "editor",
    ]
    # Round 2: nobody named and no default → the specialist is skipped.
    env.step("hmm")
    assert env.agent_selection == "editor"
    assert dependency.route("coders and writers") is None  # whole words only


def test_user_defined_dependency_in_a_few_lines():
    class Reverse(DependencyFunction):
        def next_turn(self, state):
            remaining = [a for a in reversed(state.agents) if a not in state.acted]
            return Turn(remaining[0], sees=state.acted[-1:]) if remaining else None

    rounds = play(probe(Reverse(), horizon=1))
    assert [(a, s) for a, s, _ in rounds[0]] == [
        ("d", set()),
        ("c", {"d"}),
        ("b", {"c"}),
        ("a", {"b"}),
    ]


@pytest.mark.parametrize(
    ("turns", "message"),
    [
        ([Turn("zed")], "unknown agent 'zed'"),
        ([Turn("a"), Turn("a")], "scheduled 'a' twice"),
        ([Turn("a", sees=("b",))], "have not acted yet"),
        (["a"], "must return a Turn"),
    ],
)
def test_invalid_schedules_fail_with_clear_errors(turns, message):
    class Scripted(DependencyFunction):
        def next_turn(self, state):
            return turns[len(state.actions)] if len(state.actions) < len(turns) else None

    env = probe(Scripted(), horizon=1)
    with pytest.raises((ValueError, TypeError), match=message):
        env.reset(seed=0)
        env.step("x")


def test_dag_rejects_cycles_and_unknown_agents():
    with pytest.raises(ValueError, match="cycle"):
        probe(DAG({"a": ["b"], "b": ["a"]}))
    with pytest.raises(ValueError, match="not in the team"):
        probe(DAG({"a": ["ghost"]}))
    with pytest.raises(ValueError, match="not in the team"):
        probe(Chain(["a", "ghost"]))


def test_a_round_with_no_turn_is_an_error():
    with pytest.raises(RuntimeError, match="scheduled no agent"):
        probe(Router(lambda s: None)).reset(seed=0)


@pytest.mark.parametrize("dependency", [Chain(), Independent(), DAG({"d": ["a"]})])
def test_every_agent_acts_once_per_round_in_static_schedules(dependency):
    rounds = play(probe(dependency, horizon=2))
    for turns in rounds.values():
        agents = [a for a, _, _ in turns]
        assert sorted(agents) == sorted(TEAM)
        assert len(set(agents)) == len(agents)
