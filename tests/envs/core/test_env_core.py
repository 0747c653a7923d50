"""The base env: rewards under credit rules, termination vs truncation, seeding, rendering."""

from __future__ import annotations

import pytest

import marft_envs
from marft_envs import AgentProfile, Chain, FlexPOMDPEnv, Independent, Transition
from marft_envs.core.profiles import as_profiles


def run_relay(env, actions_by_agent):
    """Step one episode; returns {agent: last() reward seen when done}."""
    final = {}
    for agent in env.agent_iter():
        _, reward, term, trunc, _ = env.last()
        if term or trunc:
            final[agent] = (reward, term, trunc)
            env.step(None)
            continue
        env.step(actions_by_agent(agent, env))
    return final


def code_of(env):
    return env.unwrapped.code


@pytest.mark.parametrize(
    ("credit", "expected"),
    [
        ("team", {"scout": 1.0, "messenger_1": 1.0, "reporter": 1.0}),
        ("graded", {"scout": 0.0, "messenger_1": 0.0, "reporter": 1.0}),
        ("last", {"scout": 0.0, "messenger_1": 0.0, "reporter": 1.0}),
        (
            lambda r, acted, profiles: {acted[0]: 2 * r},
            {"scout": 2.0, "messenger_1": 0.0, "reporter": 0.0},
        ),
    ],
)
def test_credit_rules_split_the_team_reward(credit, expected):
    env = marft_envs.make("relay-v0", n_agents=3, credit=credit)
    env.reset(seed=3)
    final = run_relay(env, lambda agent, e: f"code {code_of(e)}")
    assert {a: r for a, (r, _, _) in final.items()} == expected
    assert all(term and not trunc for _, term, trunc in final.values())


def test_unknown_credit_rule_is_rejected_early():
    with pytest.raises(ValueError, match="Unknown credit assignment rule 'everyone'"):
        marft_envs.make("relay-v0", credit="everyone")


def test_wrong_answers_truncate_at_the_horizon_with_feedback():
    env = marft_envs.make("relay-v0", horizon=3)
    env.reset(seed=0)
    observations = []
    final = {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, _ = env.last()
        if term or trunc:
            final[agent] = (reward, term, trunc)
            env.step(None)
            continue
        observations.append(obs["messages"][-1]["content"])
        env.step("I forgot")
    assert env.unwrapped.timestep == 3
    assert all(not term and trunc for _, term, trunc in final.values())
    assert any("Last round the team was wrong" in o for o in observations)


@pytest.mark.parametrize("env_id", ["relay-v0", "relay-v1"])
def test_relay_v1_shows_every_agent_the_round_index(env_id):
    env = marft_envs.make(env_id, horizon=3)
    env.reset(seed=0)
    seen: dict[str, list[str]] = {}
    for agent in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        seen.setdefault(agent, []).append(obs["messages"][-1]["content"])
        env.step("I forgot")
    for texts in seen.values():
        for t, text in enumerate(texts):
            assert (f"Round {t + 1} of 3." in text) == (env_id == "relay-v1")
    assert marft_envs.spec("relay-v1").kwargs == {"show_round": True}


def test_independent_agents_cannot_relay_the_code():
    env = marft_envs.make("relay-v0", dependency=Independent())
    successes = 0
    for seed in range(10):
        env.reset(seed=seed)

        def copy_what_you_see(agent, e):
            return e.observe(agent)["messages"][-1]["content"]

        final = run_relay(env, copy_what_you_see)
        successes += final["reporter"][0]
    assert successes == 0
    env = marft_envs.make("relay-v0", dependency=Chain())
    env.reset(seed=0)
    final = run_relay(env, lambda agent, e: e.observe(agent)["messages"][-1]["content"])
    assert final["reporter"][0] == 1.0


def test_seeding_reproduces_and_differs():
    codes = []
    for seed in (5, 5, 6):
        env = marft_envs.make("relay-v0")
        env.reset(seed=seed)
        codes.append(code_of(env))
    assert codes[0] == codes[1] != codes[2]


def test_render_ansi_and_human(capsys):
    env = marft_envs.make("relay-v0", render_mode="ansi")
    env.reset(seed=0)
    env.step("hello from the scout")
    text = env.render()
    assert "scout (sees nothing)" in text and "hello from the scout" in text
    env = marft_envs.make("relay-v0", render_mode="human")
    env.reset(seed=0)
    env.step("printed")
    assert env.render() is None
    assert "printed" in capsys.readouterr().out
    with pytest.raises(ValueError, match="render_mode='video'"):
        marft_envs.make("relay-v0", render_mode="video")


def test_render_shows_each_round_once_also_after_the_episode_ends():
    # The finished last round was drawn twice (from the history and as the "live" round) while the
    # agents stepped None.
    env = marft_envs.make("debate-v4", dataset="builtin:test", render_mode="ansi")
    env.reset(seed=4)
    script = iter(["A: \\boxed{1}", "B: \\boxed{2}", "Verdict: rebut B", "B again", "Verdict: A"])
    shown = []
    for _agent in env.agent_iter():
        if env.terminations[env.agent_selection] or env.truncations[env.agent_selection]:
            shown.append(env.render())
            env.step(None)
            continue
        env.step(next(script))
        shown.append(env.render())
    assert "B again" in shown[3] and shown[3].count("round 1") == 1
    assert shown[3].count("round 0") == 1 and shown[3].count("rewards:") == 1  # round 1 live
    for text in shown[4:]:
        assert text.count("round 0") == 1 and text.count("round 1") == 1
        assert text.count("rewards:") == 2 and text.count("Verdict: A") == 1


def test_profiles_from_dicts_accept_reference_names():
    (profile,) = as_profiles([{"role": "actor", "prompt": "Solve it.", "with_answer": True}])
    assert profile == AgentProfile("actor", "Solve it.", graded=True)
    assert AgentProfile.from_dict(profile.to_dict()) == profile
    with pytest.raises(ValueError, match="Unknown profile field"):
        AgentProfile.from_dict({"role": "x", "colour": "red"})
    with pytest.raises(ValueError, match="unique"):
        as_profiles([{"role": "x"}, {"role": "x"}])
    with pytest.raises(ValueError, match="must start with a letter"):
        AgentProfile("bad name")


def test_task_can_reward_agents_directly():
    class Direct(FlexPOMDPEnv):
        def _reset_task(self, options):
            pass

        def _observation(self, agent):
            return "go"

        def _transition(self, actions):
            return Transition(reward={"a": 0.5, "b": -1.0}, terminated=True)

    env = Direct([AgentProfile("a"), AgentProfile("b")])
    env.reset()
    env.step("x")
    env.step("y")
    assert env.history[-1].rewards == {"a": 0.5, "b": -1.0}
    # The team reward of a mapping is the mean of its values (the sum counted a success paid to
    # every agent several times); Transition(team_reward=...) sets it explicitly.
    assert env.infos["a"]["team_reward"] == -0.25


def test_last_round_is_the_latest_finished_round():
    env = marft_envs.make("relay-v0", horizon=2)
    env.reset(seed=0)
    base = env.unwrapped
    assert base.last_round is None  # no round has ended yet
    env.step("no idea")
    assert base.last_round is None  # the round is still in progress
    env.step("no idea")
    first = base.last_round
    assert first is not None and first.timestep == 0
    assert [agent for agent, _ in first.actions] == list(base.possible_agents)
    env.step("still no idea")
    assert base.last_round is first  # unchanged until the next round ends
    env.step("still no idea")
    assert base.last_round is not first and base.last_round.timestep == 1
    env.reset(seed=1)
    assert base.last_round is None
