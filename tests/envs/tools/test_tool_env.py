"""tool-math-single-v7 / tool-math-dual-v7: calls, outputs in the next observation, the budget,
routing of the dual team, and hand-graded final answers."""

from __future__ import annotations

import pytest

import marft_envs
from marft_envs.math.data import MathProblem, load_dataset
from marft_envs.sandbox.runner import namespaces_available
from marft_envs.tools import ToolRouter

needs_sandbox = pytest.mark.skipif(
    not namespaces_available(), reason="unshare may not create namespaces here"
)
# One hand-made problem: 17 * 23 = 391.
PROBLEM = load_dataset([MathProblem(problem="What is 17 times 23?", answer="391")])


def episode(env_id, script, **kwargs):
    """Play ``script`` (a list of texts, consumed in acting order); returns the env, the
    observations each agent saw, and the final rewards and infos."""
    env = marft_envs.make(env_id, dataset=PROBLEM, **kwargs)
    env.reset(seed=0)
    texts = list(script)
    seen: list[tuple[str, str]] = []
    final = {}
    for agent in env.agent_iter():
        _, reward, term, trunc, info = env.last()
        if term or trunc:
            final[agent] = (reward, info, term, trunc)
            env.step(None)
            continue
        seen.append((agent, env.observe(agent)["messages"][-1]["content"]))
        env.step(texts.pop(0))
    assert not texts, f"unused script lines {texts}"
    return env, seen, final


@needs_sandbox
def test_single_agent_calls_reads_the_output_and_answers():
    _, seen, final = episode(
        "tool-math-single-v7",
        ["Let me compute. <python>17 * 23</python>", "The tool says 391, so \\boxed{391}."],
    )
    assert [a for a, _ in seen] == ["actor", "actor"]
    assert "Output:" not in seen[0][1] and "Tool calls left: 3." in seen[0][1]
    assert "Call 1: <python>17 * 23</python>\nOutput: 391" in seen[1][1]
    assert "Tool calls left: 2." in seen[1][1]
    reward, info, term, trunc = final["actor"]
    assert (reward, info["correct"], info["tool_calls"], term, trunc) == (1.0, True, 1, True, False)


@pytest.mark.parametrize(
    ("answer", "reward"),
    [
        ("\\boxed{391}", 1.0),
        ("\\boxed{390}", 0.0),  # wrong
        ("391", 0.0),  # no \boxed{}: not a final answer, and no call either
        ("\\boxed{391", 0.0),  # unbalanced
        ("\\boxed{}", 0.0),  # empty
        ("<python>17*23</python> \\boxed{390}", 0.0),  # an answer ends the episode; call ignored
        ("\\boxed{\\text{391 or 390}}", 0.0),  # hedging
    ],
)
def test_final_answers_are_graded_exactly(answer, reward):
    _, _, final = episode("tool-math-single-v7", [answer])
    assert final["actor"][0] == reward
    assert final["actor"][1]["tool_calls"] == 0


@needs_sandbox
def test_the_budget_is_enforced_and_a_call_without_budget_ends_the_episode():
    calls = [f"<python>{k} + 1</python>" for k in range(3)]
    env, seen, final = episode("tool-math-single-v7", [*calls, "<python>99</python>"], max_calls=3)
    assert "No tool calls left" in seen[-1][1]
    assert "Output: 3" in seen[-1][1]  # the third call, 2 + 1
    reward, info, term, _ = final["actor"]
    assert (reward, info["tool_calls"], term) == (0.0, 3, True)
    assert len(env.unwrapped.history) == 4  # max_calls + 1 rounds


@needs_sandbox
def test_hostile_or_malformed_calls_cost_a_call_and_come_back_as_errors():
    _, seen, final = episode(
        "tool-math-single-v7",
        [
            "<python>open('/proc/1/environ').read() if 0 else 1/0</python>",
            "<python>import os</python>",
            "<python>sum(range(10**12))</python>",
            "\\boxed{391}",
        ],
    )
    last = seen[-1][1]
    assert "Output: Error: ZeroDivisionError" in last
    assert "Output: Error: not a single Python expression" in last
    assert (
        "Output: Error: the expression ran past its time limit (2 s of CPU time, 5 s in all)."
        in last
    )
    assert final["actor"][0] == 1.0


def test_no_call_and_no_answer_ends_with_zero():
    _, seen, final = episode("tool-math-single-v7", ["I am not sure."])
    assert len(seen) == 1 and final["actor"][0] == 0.0


@needs_sandbox
def test_dual_router_skips_the_answerer_while_the_caller_calls():
    env, seen, final = episode(
        "tool-math-dual-v7",
        ["<python>17 * 23</python>", "The product is 391. NOTE-FOR-ANSWERER", "\\boxed{391}"],
    )
    assert [a for a, _ in seen] == ["caller", "caller", "answerer"]
    assert "Output: 391" in seen[1][1] and "Output: 391" in seen[2][1]
    assert "NOTE-FOR-ANSWERER" in seen[2][1]  # the answerer sees the caller's message
    rounds = env.unwrapped.history
    assert [[a for a, _ in r.actions] for r in rounds] == [["caller"], ["caller", "answerer"]]
    assert rounds[0].turns[0].sees == () and rounds[1].turns[1].sees == ("caller",)
    assert {a: r for a, (r, *_) in final.items()} == {"caller": 0.0, "answerer": 1.0}


def test_dual_answerer_is_routed_to_when_no_calls_are_left():
    _, seen, final = episode(
        "tool-math-dual-v7", ["<python>17 * 23</python>", "\\boxed{391}"], max_calls=0
    )
    assert [a for a, _ in seen] == ["caller", "answerer"]
    assert final["answerer"][0] == 1.0 and final["answerer"][1]["tool_calls"] == 0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_calls must be a non-negative integer"):
        marft_envs.make("tool-math-single-v7", max_calls=-1)
    with pytest.raises(TypeError, match=r"sandbox must be a marft_envs\.sandbox\.Sandbox"):
        marft_envs.make("tool-math-single-v7", sandbox="local")
    with pytest.raises(ValueError, match="ToolRouter names agent"):
        marft_envs.make("tool-math-single-v7", dependency=ToolRouter())


@needs_sandbox
def test_prepare_step_runs_the_call_before_the_step():
    env = marft_envs.make("tool-math-single-v7", dataset=PROBLEM)
    env.reset(seed=0)
    base = env.unwrapped
    base.prepare_step("<python>2 ** 5</python>")
    assert list(base._pending) == ["2 ** 5"]
    env.step("<python>2 ** 5</python>")
    assert base._pending == {} and base.calls[0][1].output == "32"
