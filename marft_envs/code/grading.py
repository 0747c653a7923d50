"""From an agent's text to a reward: find its program, run it against the hidden tests, score it.

Pure functions over a :class:`~marft_envs.sandbox.runner.Sandbox`; no env state. A text with no
fenced Python block scores 0 without starting a process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from marft_envs.code.data import CodeProblem
from marft_envs.sandbox.runner import Sandbox, SandboxResult

__all__ = ["Grade", "extract_program", "grade_result", "grade_text", "no_code_grade"]

# A fenced block: ``` with an optional language tag, the code, and a closing ``` on its own line.
_FENCE = re.compile(
    r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE
)
_PYTHON_TAGS = {"", "python", "python3", "py", "py3"}


def extract_program(text: str) -> str | None:
    """The last fenced Python block of ``text`` (tag ``python``/``py`` or none), or ``None``.

    >>> extract_program("Plan...\\n```python\\nx = 1\\n```\\nThen:\\n```py\\nx = 2\\n```")
    'x = 2\\n'
    >>> extract_program("no code here") is None
    True
    """
    blocks = [code for tag, code in _FENCE.findall(text) if tag.lower() in _PYTHON_TAGS]
    if not blocks or not blocks[-1].strip():
        return None
    return blocks[-1]


@dataclass(frozen=True)
class Grade:
    """A graded program.

    Attributes:
        reward: 1.0 when every test passed, else 0.0 (or the share passed, with partial credit).
        correct: Every test passed.
        passed: Tests passed.
        total: Tests run.
        failure: Why the first failing test failed (``sandbox.FAILURE_KINDS``), or ``None``.
        detail: A short message about that failure.
    """

    reward: float
    correct: bool
    passed: int
    total: int
    failure: str | None
    detail: str = ""


def no_code_grade(problem: CodeProblem) -> Grade:
    """The grade of a text without a fenced Python block."""
    return Grade(
        0.0, False, 0, len(problem.tests), "no_code", "no fenced ```python block in the answer"
    )


def grade_result(result: SandboxResult, *, partial_credit: bool = False) -> Grade:
    """Score a sandbox run: all tests or nothing, or (``partial_credit``) the share passed."""
    correct = result.all_passed
    if partial_credit:
        reward = result.passed / result.total if result.total else 0.0
    else:
        reward = float(correct)
    return Grade(reward, correct, result.passed, result.total, result.failure, result.detail)


def grade_text(
    text: str, problem: CodeProblem, sandbox: Sandbox, *, partial_credit: bool = False
) -> Grade:
    """Extract, run and score an agent's answer in one call (blocks for the run)."""
    code = extract_program(text)
    if code is None:
        return no_code_grade(problem)
    return grade_result(
        sandbox.run(problem.program(code), problem.unit_tests), partial_credit=partial_credit
    )
