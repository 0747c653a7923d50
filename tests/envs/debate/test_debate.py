"""debate-v7 (with v0's round credit where rewards are checked): the verdict grammar, the
judge-driven schedule (who speaks, who sees what, how many rounds) and the team reward from the
final answer, on a hand-made problem (17 * 23 = 391)."""

from __future__ import annotations

import pytest

import marft_envs
from marft_envs.debate import JudgeSchedule, Verdict, parse_verdict
from marft_envs.math.data import MathProblem, load_dataset

SOLVERS = ("solver_a", "solver_b")
PROBLEM = load_dataset([MathProblem(problem="What is 17 times 23?", answer="391")])


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Verdict: A", Verdict(pick="solver_a")),
        ("B is right.\nverdict: **B**.", Verdict(pick="solver_b")),
        ("VERDICT: Solver B", Verdict(pick="solver_b")),
        ("Verdict: solver_a", Verdict(pick="solver_a")),
        ("Verdict: rebut A", Verdict(rebut=("solver_a",))),
        ("Verdict: rebuttal b!", Verdict(rebut=("solver_b",))),
        ("Verdict: rebut both", Verdict(rebut=SOLVERS)),
        ("Verdict: rebut A\nOn second thought... Verdict: B", Verdict(pick="solver_b")),  # last
        ("Verdict: both", None),  # "both" only asks for rebuttals
        ("Verdict: C", None),  # no Solver C in this debate
        ("Verdict: A or B", None),  # undecided
        ("Verdict:", None),
        ("I pick A.", None),  # no Verdict line
        ("Verdict: rebut", None),
        ("Verdict: A\nVerdict: the debate is over", None),  # the last line decides, and is junk
        ("\x00\ud800Verdict\n: A", None),
    ],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text, SOLVERS) == verdict


def debate(script, **kwargs):
    """Play a debate where ``script`` maps each agent to its texts (one per turn, in order)."""
    env = marft_envs.make("debate-v7", dataset=PROBLEM, **{"credit_scope": "round", **kwargs})
    env.reset(seed=0)
    lines = {agent: list(texts) for agent, texts in script.items()}
    seen = []
    final = {}
    for agent in env.agent_iter():
        _, reward, term, trunc, info = env.last()
        if term or trunc:
            final[agent] = (reward, info)
            env.step(None)
            continue
        seen.append((env.unwrapped.timestep, agent, info["visible_agents"]))
        env.step(lines[agent].pop(0))
    assert not any(lines.values()), f"unused script lines {lines}"
    return env, seen, final


RIGHT, WRONG = "17 * 23 = 391, so \\boxed{391}", "About \\boxed{400}"


@pytest.mark.parametrize(
    ("verdict", "reward", "failure"),
    [
        ("Verdict: A", 1.0, None),  # A is right
        ("Verdict: B", 0.0, None),  # B is wrong
        (
            "Both could be right; \\boxed{391}",
            0.0,
            "no_verdict",
        ),  # the judge's own box is no verdict
        ("Verdict: C", 0.0, "no_verdict"),
    ],
)
def test_one_round_verdicts_decide_the_team_reward(verdict, reward, failure):
    _, seen, final = debate({"solver_a": [RIGHT], "solver_b": [WRONG], "judge": [verdict]})
    assert seen == [
        (0, "solver_a", []),
        (0, "solver_b", []),
        (0, "judge", ["solver_a", "solver_b"]),
    ]
    assert {a: r for a, (r, _) in final.items()} == dict.fromkeys(
        ("solver_a", "solver_b", "judge"), reward
    )
    info = final["judge"][1]
    assert info["correct"] is bool(reward) and info["failure"] == failure


def test_a_solver_cannot_issue_the_verdict():
    _, _, final = debate(
        {"solver_a": ["Verdict: B " + WRONG], "solver_b": [RIGHT], "judge": ["No idea."]}
    )
    assert final["judge"][1]["failure"] == "no_verdict" and final["judge"][0] == 0.0


def test_a_picked_solver_without_an_answer_scores_zero():
    _, _, final = debate(
        {"solver_a": ["I think it's big."], "solver_b": [RIGHT], "judge": ["Verdict: A"]}
    )
    assert final["judge"][0] == 0.0 and final["judge"][1]["answer_given"] is None


def test_rebuttals_schedule_only_the_named_solver_and_the_latest_answer_counts():
    env, seen, final = debate(
        {
            "solver_a": [RIGHT],
            "solver_b": [WRONG, "I was wrong: \\boxed{391}"],
            "judge": ["They disagree. Verdict: rebut B", "Verdict: B"],
        }
    )
    assert seen == [
        (0, "solver_a", []),
        (0, "solver_b", []),
        (0, "judge", ["solver_a", "solver_b"]),
        (1, "solver_b", []),  # only B speaks again; A's answer is in the observation, not a turn
        (1, "judge", ["solver_b"]),
    ]
    history = env.unwrapped.history
    assert history[1].turns[0].sees == () and "solver_a" not in dict(history[1].actions)
    # The final round's actors share the team reward (credit rule "team").
    assert {a: r for a, (r, _) in final.items()} == {"solver_a": 0.0, "solver_b": 1.0, "judge": 1.0}
    assert final["judge"][1]["rounds"] == 2


def test_solvers_see_earlier_rounds_but_not_each_others_current_answer():
    env = marft_envs.make("debate-v7", dataset=PROBLEM)
    env.reset(seed=0)
    env.step("A-SAYS-ONE \\boxed{1}")
    assert "A-SAYS-ONE" not in env.observe("solver_b")["messages"][-1]["content"]
    env.step("B-SAYS-TWO \\boxed{2}")
    assert "A-SAYS-ONE" in env.observe("judge")["messages"][-1]["content"]
    env.step("Verdict: rebut both")
    second = env.observe("solver_b")["messages"][-1]["content"]
    assert "A-SAYS-ONE" in second and "B-SAYS-TWO" in second and "rebuttal" in second


def test_rounds_are_bounded_and_a_late_rebuttal_scores_zero():
    env, seen, final = debate(
        {
            "solver_a": [RIGHT, RIGHT, RIGHT],
            "solver_b": [WRONG, WRONG, WRONG],
            "judge": ["Verdict: rebut both"] * 3,
        },
        max_rounds=3,
    )
    assert len(env.unwrapped.history) == 3
    assert final["judge"][1]["failure"] == "rebuttal_after_last_round"
    assert all(r == 0.0 for r, _ in final.values())
    last_round_judge = [a for t, a, _ in seen if t == 2]
    assert last_round_judge == ["solver_a", "solver_b", "judge"]


def test_schedule_and_settings_are_checked():
    with pytest.raises(ValueError, match="at least two solvers"):
        JudgeSchedule(("solver_a",))
    with pytest.raises(ValueError, match="JudgeSchedule names agent"):
        marft_envs.make("debate-v7", dependency=JudgeSchedule(("x", "y"), "judge"))
    with pytest.raises(ValueError, match="max_rounds must be a positive integer"):
        marft_envs.make("debate-v7", max_rounds=0)
    with pytest.raises(ValueError, match="exactly one graded agent"):
        marft_envs.make("debate-v7", profiles=[{"role": "a"}, {"role": "b"}])
