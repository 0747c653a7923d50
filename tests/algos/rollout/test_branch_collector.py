"""The branching collector: trees of width × rollouts episodes per branch point, shared prefixes
held once, nesting, episodes that end before a branch point, env copies, and the setting's
checks (its command-line form included)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import pytest
import torch

from marft_algos.rollout.branch_settings import branch_levels, episodes_per_tree, parse_branch
from marft_algos.rollout.branching import BranchingCollector, EnvNotCopyable, copy_env
from marft_algos.rollout.collector import EpisodeRequest, GenerationSettings
from marft_envs import AgentProfile, FlexPOMDPEnv, Router, Transition

CHOICES = {"router": ["stop", "go-a", "go-b"], "solver": ["1", "2", "3", "4"]}


@dataclass
class _Generation:
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool = True


class ScriptedPolicy:
    """Draws each action uniformly from a fixed list with the collector's generator."""

    agents = ["router", "solver"]

    def generate(self, agent, messages_batch, settings, *, generator):
        out = []
        for messages in messages_batch:
            k = int(torch.randint(0, len(CHOICES[agent]), (1,), generator=generator))
            prompt = [len(m["content"]) for m in messages]
            out.append(_Generation(prompt, [k + 1], [-float(k + 1)], CHOICES[agent][k]))
        return out


def _route(state):
    """The router acts first; "stop" ends the round (and the episode) before the solver acts."""
    if not state.actions:
        return "router"
    if len(state.actions) == 1 and state.action_of("router") != "stop":
        return "solver"
    return None


class RouteEnv(FlexPOMDPEnv):
    """Two rounds; the solver earns its digit / 4 when the router sent it, nothing on "stop"."""

    def __init__(self, rounds=2):
        profiles = [AgentProfile("router", "Route."), AgentProfile("solver", "Solve.", graded=True)]
        super().__init__(profiles, Router(_route), horizon=rounds, credit="team")
        self.rounds = rounds

    def _reset_task(self, options):
        self.target = int(self.np_random.integers(0, 9))

    def _observation(self, agent):
        return f"Task {self.target}."

    def _transition(self, actions):
        stop = actions.get("router") == "stop"
        reward = 0.0 if stop else int(actions["solver"]) / 4
        return Transition(reward=reward, terminated=stop or self.timestep == self.rounds - 1)


class LockedEnv(RouteEnv):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


class ClonedEnv(LockedEnv):
    clones = 0

    def clone(self):
        ClonedEnv.clones += 1
        twin = ClonedEnv.__new__(ClonedEnv)
        twin.__dict__.update({k: v for k, v in self.__dict__.items() if k != "lock"})
        twin.__dict__ = __import__("copy").deepcopy(twin.__dict__)
        twin.lock = threading.Lock()
        return twin


def _collector(branch, envs=None, seed=0):
    envs = envs or [RouteEnv() for _ in range(2)]
    return BranchingCollector(
        ScriptedPolicy(), envs, GenerationSettings(), seed=seed, branch=branch
    )


def _key(d):
    return (d.agent, d.timestep, tuple(d.prompt_ids), tuple(d.action_ids), d.text)


def test_one_level_gives_width_times_rollouts_episodes_with_one_shared_prefix():
    collector = _collector({"solver": {"width": 3, "rollouts": 2}})
    episodes = collector.collect([EpisodeRequest(seed=s, group=g) for g, s in enumerate([4, 9, 4])])
    by_tree = Counter(e.branch[0] for e in episodes)
    assert {1, 6} <= set(by_tree.values())  # this seed both stops before and branches
    for tree, count in by_tree.items():
        tree_episodes = [e for e in episodes if e.branch[0] == tree]
        first = tree_episodes[0].decisions[0]
        if first.text == "stop":  # ended before the branch point: a tree of one episode
            assert count == 1 and tree_episodes[0].branch == (tree,)
            continue
        assert count == 6
        assert sorted(e.branch for e in tree_episodes) == [
            (tree, w, m) for w in range(3) for m in range(2)
        ]
        # The router's decision before the branch point is the same in all six, held once.
        routers = [e.decisions[0] for e in tree_episodes]
        assert len({_key(d) for d in routers}) == 1
        assert [d.branch_copy for d in routers] == [False] + [True] * 5
        assert {d.branch for d in routers} == {(tree,)}
        # The branched decision: one per alternative, copied into its second continuation.
        solvers = [e.decisions[1] for e in tree_episodes]
        assert [d.branch for d in solvers] == [(tree, w) for w in range(3) for _ in range(2)]
        assert [d.branch_copy for d in solvers] == [False, True] * 3
        for w in range(3):
            assert _key(solvers[2 * w]) == _key(solvers[2 * w + 1])
        assert solvers[0].prompt_ids == solvers[2].prompt_ids == solvers[4].prompt_ids
        # After it every continuation is its own (never a copy), in its own node.
        for e in tree_episodes:
            assert all(not d.branch_copy and d.branch == e.branch for d in e.decisions[2:])
        # Each episode's return is its own rounds' rewards.
        for e in tree_episodes:
            solved = [int(d.text) / 4 for d in e.decisions if d.agent == "solver"]
            assert e.team_return == pytest.approx(sum(solved))
    assert [d.episode for e in episodes for d in e.decisions] == [
        i for i, e in enumerate(episodes) for _ in e.decisions
    ]


def test_nested_levels_multiply_and_early_endings_stay_leaves():
    branch = {"router": {"width": 3, "rollouts": 1}, "solver": {"width": 2, "rollouts": 2}}
    collector = _collector(branch, seed=3)
    assert collector.episodes_per_tree == 12
    episodes = collector.collect([EpisodeRequest(seed=s, group=0) for s in range(4)])
    assert {3, 5} == {len(e.branch) for e in episodes}  # some alternatives stop early
    for tree in range(4):
        tree_episodes = [e for e in episodes if e.branch[0] == tree]
        stops = {e.branch[1] for e in tree_episodes if e.decisions[0].text == "stop"}
        # A stopped alternative is one leaf (r, w, 0); every other has 2 × 2 leaves below it.
        assert len(tree_episodes) == len(stops) + 4 * (3 - len(stops))
        for e in tree_episodes:
            assert len(e.branch) == (3 if e.branch[1] in stops else 5)
        # Only one decision per (node, agent, timestep) is not a copy.
        originals = Counter(
            (d.branch, d.agent, d.timestep)
            for e in tree_episodes
            for d in e.decisions
            if not d.branch_copy
        )
        assert set(originals.values()) == {1}


def test_seeded_collections_repeat_exactly():
    branch = {"router": {"width": 2, "rollouts": 2}, "solver": {"width": 2, "rollouts": 1}}
    runs = [
        _collector(branch, seed=7).collect([EpisodeRequest(seed=1), EpisodeRequest(seed=2)])
        for _ in range(2)
    ]
    flat = [[(e.branch, e.team_return, [_key(d) for d in e.decisions]) for e in r] for r in runs]
    assert flat[0] == flat[1]


def test_an_env_that_cannot_be_copied_is_refused_and_clone_is_used():
    with pytest.raises(EnvNotCopyable, match=r"Define LockedEnv.clone\(\)"):
        _collector({"solver": {"width": 2, "rollouts": 1}}, envs=[LockedEnv()])
    before = ClonedEnv.clones
    collector = _collector({"solver": {"width": 2, "rollouts": 2}}, envs=[ClonedEnv()])
    episodes = collector.collect([EpisodeRequest(seed=s) for s in range(3)])
    assert ClonedEnv.clones > before and episodes
    env = RouteEnv()
    env.reset(seed=0)
    twin = copy_env(env)
    twin.step("go-a")
    assert env.agent_selection == "router" and twin.agent_selection == "solver"


def test_branch_setting_checks_and_its_command_line_form():
    assert parse_branch("router=3x4") == {"router": {"width": 3, "rollouts": 4}}
    assert parse_branch("router=3x4, solver=2X2") == {
        "router": {"width": 3, "rollouts": 4},
        "solver": {"width": 2, "rollouts": 2},
    }
    assert parse_branch('{"router": {"width": 2, "rollouts": 1}}') == {
        "router": {"width": 2, "rollouts": 1}
    }
    assert parse_branch("none") is None
    assert episodes_per_tree(branch_levels(parse_branch("router=3x4,solver=2x2"))) == 48
    with pytest.raises(ValueError, match="AGENT=WIDTHxROLLOUTS"):
        parse_branch("router:3")
    with pytest.raises(ValueError, match=r"\['width'\] must be a whole number >= 2"):
        branch_levels({"router": {"width": 1, "rollouts": 4}})
    with pytest.raises(ValueError, match=r"\['rollouts'\] must be a whole number >= 1"):
        branch_levels({"router": {"width": 2, "rollouts": 0}})
    with pytest.raises(ValueError, match="must be \\{'width': W, 'rollouts': M\\}"):
        branch_levels({"router": 3})
    with pytest.raises(ValueError, match="does not have"):
        _collector({"critic": {"width": 2, "rollouts": 1}})
