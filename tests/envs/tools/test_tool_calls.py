"""The Python tool: finding calls in text, refusing non-expressions on the host, and running
expressions (correct, failing and hostile ones) in the code sandbox. Real processes, no mocks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from marft_envs.sandbox.runner import namespaces_available
from marft_envs.tools.calls import (
    MAX_EXPRESSION_CHARS,
    check_expression,
    find_tool_call,
    run_expression,
)

needs_sandbox = pytest.mark.skipif(
    not namespaces_available(), reason="unshare may not create namespaces here"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("First <python>17 * 23</python>.", "17 * 23"),
        ("<PYTHON>\n  2 ** 10\n</PYTHON>", "2 ** 10"),
        ("<python>1</python> then <python>2</python>", "1"),  # only the first call counts
        ("<python>unclosed", None),
        ("no call, \\boxed{4}", None),
        ("```python\nprint(3)\n```", None),  # a code block is not a tool call
    ],
)
def test_find_tool_call(text, expected):
    assert find_tool_call(text) == expected


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("2 ** 10", None),
        ("math.gcd(12, 18) + Fraction(1, 3)", None),
        ("", "empty expression"),
        ("x = 3", "not a single Python expression"),
        ("import os", "not a single Python expression"),
        ("1 +", "not a single Python expression"),
        ("a\x00b", "not a single Python expression"),
        ("(" * 201 + ")" * 201, "not a single Python expression"),  # too deeply nested to parse
        ("1+" * MAX_EXPRESSION_CHARS + "1", "the limit is 500"),
    ],
)
def test_check_expression_refuses_what_is_not_one_expression(expression, problem):
    verdict = check_expression(expression)
    assert (verdict is None) if problem is None else (problem in verdict)


@needs_sandbox
@pytest.mark.parametrize(
    ("expression", "ok", "output"),
    [
        ("17 * 23", True, "391"),  # hand-computed: 17 * 23 = 391
        ("Fraction(1, 3) + Fraction(1, 6)", True, "Fraction(1, 2)"),
        ("math.sqrt(2) ** 2 == 2", True, "False"),
        ("'ab' * 2", True, "'abab'"),
        ("1 / 0", False, "Error: ZeroDivisionError: division by zero"),
        ("int('x')", False, "Error: ValueError: invalid literal for int() with base 10: 'x'"),
        ("x = 1", False, "Error: not a single Python expression"),
    ],
)
def test_run_expression_returns_the_value_or_an_error(expression, ok, output):
    result = run_expression(expression)
    assert result.ok is ok
    assert result.output.startswith(output)


@needs_sandbox
def test_long_outputs_are_cut():
    result = run_expression("'z' * 10000")
    assert result.ok and result.output.endswith("... (cut)") and len(result.output) < 230


@needs_sandbox
@pytest.mark.parametrize(
    ("expression", "error"),
    [
        (
            "sum(range(10 ** 12))",
            "ran past its time limit (2 s of CPU time, 5 s in all)",
        ),  # CPU time
        ("[0] * (10 ** 10)", "ran out of memory"),  # address space
        ("__import__('os').kill(1, 9)", "Error:"),  # signal the host's init
        ("__import__('sys').exit(0)", "Error:"),
        ("type('X', (), {'__repr__': lambda s: 5})()", "Error: TypeError"),
    ],
)
def test_hostile_expressions_get_an_error_line(expression, error):
    result = run_expression(expression)
    assert not result.ok
    assert error in result.output


@needs_sandbox
def test_forking_expressions_return_a_line_and_the_next_call_works():
    # The sandbox's own tests check that forked processes die with the run (PID namespace).
    for expression in (
        "[__import__('os').fork() for _ in range(50)]",
        "__import__('os').fork() or __import__('time').sleep(60)",
    ):
        assert isinstance(run_expression(expression).output, str)
    assert run_expression("6 * 7").output == "42"


@needs_sandbox
def test_a_tool_call_cannot_write_on_the_host(tmp_path):
    target = tmp_path / "open"
    target.mkdir()
    target.chmod(0o777)
    outside = str(target / "escaped")
    result = run_expression(f"open({outside!r}, 'w').write('escaped')")
    assert not result.ok and "Error:" in result.output
    assert not Path(outside).exists()
    # /tmp in the sandbox is the run's own tmpfs: the write works there and never reaches the host.
    private = f"/tmp/marft-tool-escape-{os.getpid()}"
    run_expression(f"open({private!r}, 'w').write('escaped')")
    assert not Path(private).exists()


def test_a_timeout_names_both_limits_whichever_stopped_it():
    # The verdict is "timeout" for CPU time and for the wall clock alike; the text must not
    # claim the one that did not apply (a 5 s wall timeout once read "the 2-second limit").
    from marft_envs.sandbox.runner import SandboxResult
    from marft_envs.tools.calls import read_result

    for detail in ("the program used up its CPU time", "the program ran past the time limit"):
        text = read_result(SandboxResult((False,), "timeout", detail)).output
        assert (
            text == "Error: the expression ran past its time limit (2 s of CPU time, 5 s in all)."
        )
