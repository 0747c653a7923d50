"""Tool calls: a Python expression in an agent's text, run in the code family's sandbox.

An agent calls the tool by writing one expression between ``<python>`` and ``</python>``; only
the first call of a text counts. The expression is checked on the host only by parsing
(:func:`ast.parse`, never compiled or run here), then evaluated inside a fresh
:class:`~marft_envs.sandbox.runner.Sandbox` run with short limits (:data:`TOOL_LIMITS`: 2 s of CPU,
256 MiB), with ``math`` and ``Fraction`` imported. What comes back is the ``repr`` of the value
(cut to :data:`MAX_OUTPUT_CHARS`), or an ``Error: ...`` line: for text that is not a single
expression, an exception, a time-out, a memory blow-up, or a value that is not plain data. A
hostile expression meets the sandbox's defences (see :mod:`marft_envs.sandbox.runner`) and gets an
error line; it never runs on the host.

>>> find_tool_call("Let me compute <python>17 * 23</python> first.")
'17 * 23'
"""

from __future__ import annotations

import ast
import functools
import logging
import re
from concurrent.futures import Future
from dataclasses import dataclass

from marft_envs.sandbox.runner import Sandbox, SandboxLimits, SandboxResult, UnitTests

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_OUTPUT_CHARS",
    "TOOL_LIMITS",
    "ToolResult",
    "ToolSandboxError",
    "check_expression",
    "check_sandbox_runs",
    "find_tool_call",
    "read_result",
    "run_expression",
    "submit_expression",
    "tool_sandbox",
]

logger = logging.getLogger(__name__)

#: Longest expression the tool accepts, in characters.
MAX_EXPRESSION_CHARS = 500
#: Longest output shown to the agent, in characters.
MAX_OUTPUT_CHARS = 200
#: Limits of one tool call: a calculator's budget, far below a graded program's.
TOOL_LIMITS = SandboxLimits(
    cpu_seconds=2,
    wall_seconds=5.0,
    memory_bytes=256 << 20,
    file_size_bytes=1 << 20,
    tmpfs_bytes=4 << 20,
    open_files=32,
    message_bytes=1 << 16,
)

_CALL = re.compile(r"<python>(.*?)</python>", re.DOTALL | re.IGNORECASE)
_MARK = "marft-tool-value:"
_PRELUDE = "import math\nfrom fractions import Fraction\n\n"
# The sandbox returns only plain values, so the runner writes the value's repr (a Fraction or a
# Decimal shows as itself) and the one "test" reports that text through its assertion message.
_REPORT = UnitTests(tests=(f"assert False, {_MARK!r} + str(tool_call())",))
_REPEATED_TYPE = re.compile(r"^(\w+): \1: ")


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one call: ``ok`` and the text the agent sees next (a value or an error)."""

    ok: bool
    output: str


def find_tool_call(text: str) -> str | None:
    """The expression of the first ``<python>...</python>`` in ``text`` (stripped), or ``None``."""
    match = _CALL.search(text)
    return match.group(1).strip() if match else None


def check_expression(expression: str) -> str | None:
    """Why ``expression`` cannot be run (one line), or ``None`` when it is a single expression."""
    if not expression:
        return (
            "Error: empty expression; write one Python expression, e.g. <python>2 ** 10</python>."
        )
    if len(expression) > MAX_EXPRESSION_CHARS:
        return f"Error: the expression has {len(expression)} characters; the limit is {MAX_EXPRESSION_CHARS}."
    try:
        ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        reason = getattr(err, "msg", None) or type(err).__name__
        return (
            f"Error: not a single Python expression ({reason}); statements and imports are not run."
        )
    return None


@functools.lru_cache(maxsize=1)
def tool_sandbox() -> Sandbox:
    """The process-wide sandbox of tool calls (one worker pool for every env copy)."""
    return Sandbox(TOOL_LIMITS)


class ToolSandboxError(RuntimeError):
    """The sandbox cannot run tool calls on this machine (the message says why)."""


_WORKING: set[int] = set()  # ids of sandboxes that ran the probe


def check_sandbox_runs(sandbox: Sandbox | None = None) -> None:
    """Run ``1 + 1`` once per sandbox; raise when it does not give ``2``.

    Where the sandbox cannot run (no namespaces, no permission to set limits, ...) every call would
    return the same error line, so an env would train on nothing but errors: it refuses to start
    instead, as the code env does.

    Raises:
        ToolSandboxError: Naming what the probe returned.
    """
    box = sandbox or tool_sandbox()
    if id(box) in _WORKING:
        return
    result = run_expression("1 + 1", box)
    if not (result.ok and result.output == "2"):
        raise ToolSandboxError(
            f"The tool sandbox cannot run Python on this machine (the probe 1 + 1 gave "
            f"{result.output!r}); tool calls would all fail. Run where the code sandbox works "
            f"(see docs/code_envs.md), or use a math env without tools (math-single-v7)."
        )
    _WORKING.add(id(box))


def _program(expression: str) -> str:
    # The newline before the closing parenthesis keeps a trailing comment from swallowing it.
    return f"{_PRELUDE}def tool_call():\n    return repr((\n{expression}\n    ))[:{MAX_OUTPUT_CHARS + 1}]\n"


def submit_expression(expression: str, sandbox: Sandbox | None = None) -> Future[SandboxResult]:
    """Start running a checked expression (see :func:`check_expression`) on the sandbox's pool."""
    return (sandbox or tool_sandbox()).submit(_program(expression), _REPORT)


def read_result(result: SandboxResult) -> ToolResult:
    """The agent-facing text of a sandbox run of :func:`_program`."""
    detail = result.detail
    prefix = f"AssertionError: {_MARK}"
    if result.failure == "wrong_answer" and detail.startswith(prefix):
        value = detail[len(prefix) :]
        if len(value) > MAX_OUTPUT_CHARS:
            value = value[:MAX_OUTPUT_CHARS] + " ... (cut)"
        return ToolResult(True, value)
    if result.failure == "timeout":
        # Which limit stopped it (CPU time, or the wall clock) the verdict does not always tell.
        return ToolResult(
            False,
            f"Error: the expression ran past its time limit ({TOOL_LIMITS.cpu_seconds} s of CPU "
            f"time, {TOOL_LIMITS.wall_seconds:g} s in all).",
        )
    if result.failure == "memory":
        return ToolResult(False, "Error: the expression ran out of memory.")
    detail = _REPEATED_TYPE.sub(r"\1: ", detail)
    return ToolResult(False, f"Error: {detail or result.failure}"[: MAX_OUTPUT_CHARS + 7])


def run_expression(expression: str, sandbox: Sandbox | None = None) -> ToolResult:
    """Check, run and read one expression (blocks for the run). Never raises for bad input."""
    problem = check_expression(expression)
    if problem is not None:
        return ToolResult(False, problem)
    try:
        future = submit_expression(expression, sandbox)
    except OSError as err:  # no sandbox can run here (e.g. isolation not permitted)
        logger.warning("The Python tool cannot run: %s", err)
        return ToolResult(False, f"Error: the Python tool is unavailable here ({err}).")
    return read_result(future.result())
