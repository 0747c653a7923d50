"""The code environments: rewards from the sandbox, infos, options, retries, batched grading."""

from __future__ import annotations

import json

import pytest

import marft_envs
from marft_envs.code import CodeEnv, CodeProblem, Sandbox, SandboxLimits
from marft_envs.code.grading import extract_program
from marft_envs.sandbox.runner import available_isolation

pytestmark = pytest.mark.skipif(
    available_isolation() is None, reason="no code sandbox can run here"
)

LIMITS = SandboxLimits(cpu_seconds=5, wall_seconds=10.0)

PROBLEMS = [
    CodeProblem(
        prompt="Write `add(a, b)`.",
        tests=("assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"),
        reference="def add(a, b):\n    return a + b",
        entry_point="add",
        id="add",
    ),
    CodeProblem(
        prompt="Write `neg(x)`.",
        tests=("assert neg(1) == -1",),
        reference="def neg(x):\n    return -x",
        entry_point="neg",
        id="neg",
    ),
]


def block(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


class NoProcesses(Sandbox):
    """A sandbox that fails the test if anything tries to run a program."""

    def run(self, program, tests):
        raise AssertionError("a program was run")

    def submit(self, program, tests):
        raise AssertionError("a program was submitted")


def play(env, *actions):
    for action in actions:
        env.step(action)
    return env


def test_reference_is_rewarded_and_infos_say_how_many_tests_passed():
    env = CodeEnv(PROBLEMS, "dual", limits=LIMITS)
    env.reset(seed=0, options={"index": 0})
    assert env.agent_selection == "tester"
    play(env, "Check zeros.", block(PROBLEMS[0].reference))
    assert env.rewards == {"tester": 0.0, "coder": 1.0}
    info = env.infos["coder"]
    assert info["correct"] and info["tests_passed"] == info["tests_total"] == 3
    assert info["failure"] is None and info["problem_id"] == "add"
    assert all(env.terminations.values())


def test_wrong_program_gets_zero_with_the_failure_kind():
    env = CodeEnv(PROBLEMS, "single", limits=LIMITS)
    env.reset(options={"index": 0})
    play(env, block("def add(a, b):\n    return b + 1"))
    info = env.infos["coder"]
    assert env.rewards["coder"] == 0.0
    assert (info["tests_passed"], info["tests_total"], info["failure"]) == (1, 3, "wrong_answer")


def test_partial_credit_rewards_the_share_of_tests_passed():
    env = CodeEnv(PROBLEMS, "single", limits=LIMITS, partial_credit=True)
    env.reset(options={"index": 0})
    play(env, block("def add(a, b):\n    return b + 1"))
    assert env.rewards["coder"] == pytest.approx(1 / 3)
    assert not env.infos["coder"]["correct"]


def test_no_code_block_scores_zero_without_starting_a_process():
    env = CodeEnv(PROBLEMS, "dual", sandbox=NoProcesses(LIMITS))
    env.reset(options={"index": 1})
    env.unwrapped.prepare_step("plan")  # the tester is not graded: nothing to start
    play(env, "```python\nassert neg(2) == -2\n```", "def neg(x): return -x  (no fence)")
    assert env.rewards["coder"] == 0.0
    assert env.infos["coder"]["failure"] == "no_code" and env.infos["coder"]["tests_total"] == 1


def test_reset_index_pins_the_problem_and_bad_index_is_rejected():
    env = CodeEnv(PROBLEMS, "single", limits=LIMITS)
    env.reset(options={"index": 1})
    assert "neg(x)" in env.observe("coder")["messages"][-1]["content"]
    with pytest.raises(IndexError, match="outside the dataset"):
        env.reset(options={"index": 2})


def test_the_coder_sees_the_testers_cases_and_the_tester_does_not_see_the_coder():
    env = CodeEnv(PROBLEMS, "dual", limits=LIMITS)
    env.reset(options={"index": 0})
    assert "[coder]" not in env.observe("tester")["messages"][-1]["content"]
    env.step("EDGE-CASES-HERE")
    assert "EDGE-CASES-HERE" in env.observe("coder")["messages"][-1]["content"]


def test_retry_variant_feeds_back_the_failure_and_ends_on_success():
    env = marft_envs.make("code-dual-retry-v2", dataset=PROBLEMS, limits=LIMITS)
    env.reset(options={"index": 0})
    play(env, "plan", block("def add(a, b):\n    return a - b"))
    assert env.agents and not any(env.terminations.values())
    feedback = env.observe("tester")["messages"][-1]["content"]
    assert "Attempt 1:" in feedback and "return a - b" in feedback
    assert "passed 1 of 3 tests" in feedback and "wrong_answer" in feedback
    play(env, "plan", block(PROBLEMS[0].reference))
    assert env.rewards["coder"] == 1.0 and all(env.terminations.values())
    assert env.unwrapped.timestep == 2


def test_retry_feedback_of_a_failure_is_bounded_and_holds_no_host_file():
    env = marft_envs.make("code-dual-retry-v2", dataset=PROBLEMS, limits=LIMITS)
    env.reset(options={"index": 0})
    leak = (
        "def add(a, b):\n"
        "    try:\n"
        "        text = open('/etc/passwd').read()\n"
        "    except OSError as err:\n"
        "        text = str(err)\n"
        "    raise ValueError('\\x1b[2J' + text + 'X' * 3000)\n"
    )
    play(env, "plan", block(leak))
    detail = env.infos["coder"]["failure_detail"]
    assert detail.startswith("ValueError: ") and len(detail) <= 300 and detail.isprintable()
    feedback = env.observe("tester")["messages"][-1]["content"]
    assert f"({detail})" in feedback and "\x1b" not in feedback and "root:x:0" not in feedback


@pytest.mark.parametrize("old", ["v0", "v1"])
def test_old_ids_build_v2_and_say_what_changed(old):
    with pytest.warns(
        marft_envs.OutdatedEnvWarning, match=r"code-dual-v2.*kill of its process.*kernel keys"
    ):
        env = marft_envs.make(f"code-dual-{old}", dataset=PROBLEMS, limits=LIMITS)
    assert env.spec.id == "code-dual-v2"


def test_retry_feedback_names_a_self_kill_not_a_time_out():
    # v2: the retry team is told the program killed its own process, not that it ran too long.
    env = marft_envs.make("code-dual-retry-v2", dataset=PROBLEMS, limits=LIMITS)
    env.reset(options={"index": 0})
    program = "import os\ndef add(a, b):\n    os.kill(os.getpid(), 9)\n"
    play(env, "plan", block(program))
    assert env.infos["coder"]["failure"] == "runtime_error"
    feedback = env.observe("tester")["messages"][-1]["content"]
    assert "killed by signal 9 (SIGKILL)" in feedback and "CPU time" not in feedback


def test_prepare_step_starts_the_run_and_step_uses_it():
    env = CodeEnv(PROBLEMS, "single", limits=LIMITS)
    env.reset(options={"index": 0})
    action = block(PROBLEMS[0].reference)
    env.prepare_step(action)
    (future,) = env._pending.values()
    env.step(action)
    assert future.done() and env._pending == {}
    assert env.rewards["coder"] == 1.0


def test_bad_arguments_get_clear_errors():
    with pytest.raises(ValueError, match="Unknown code team"):
        CodeEnv(PROBLEMS, "trio")
    with pytest.raises(ValueError, match="max_attempts"):
        CodeEnv(PROBLEMS, max_attempts=0)
    with pytest.raises(TypeError, match="Sandbox"):
        CodeEnv(PROBLEMS, sandbox="docker")
    with pytest.raises(ValueError, match="graded agent"):
        CodeEnv(PROBLEMS, [{"role": "coder"}])


def test_extract_program_takes_the_last_python_block():
    text = "```python\nx = 1\n```\n```bash\nrm -rf /\n```\n```py\nx = 2\n```\ntrailing"
    assert extract_program(text) == "x = 2\n"
    assert extract_program("```python\nunclosed") is None
    assert extract_program("```python\n\n```") is None


def test_make_on_real_mbpp_rewards_references(shared_data, tmp_path):
    rows = json.loads((shared_data / "mbpp_sanitized.json").read_text())[:6]
    path = tmp_path / "mbpp_sanitized.json"
    path.write_text(json.dumps(rows))
    env = marft_envs.make("code-dual-v2", dataset=str(path), limits=LIMITS)
    for index in range(len(rows)):
        env.reset(options={"index": index})
        play(env, "plan", block(rows[index]["code"]))
        assert env.rewards["coder"] == 1.0, env.infos["coder"]
