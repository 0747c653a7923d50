"""Agent profiles for the code teams.

Prompts are plain text: no chat-template tokens. They are part of each env's version: changing a
prompt here means registering a new env version.
"""

from __future__ import annotations

from marft_envs.core.profiles import AgentProfile

__all__ = ["DUAL_PROFILES", "SINGLE_PROFILES"]

SINGLE_PROFILES = (
    AgentProfile(
        "coder",
        "You are the Coder. Solve the programming task in Python. Put the complete program (imports "
        "and the requested function) in one ```python code block; only the last code block is run.",
        graded=True,
    ),
)

DUAL_PROFILES = (
    AgentProfile(
        "tester",
        "You are the Tester in a team of two (Tester -> Coder). Do not solve the task. Explain the "
        "edge cases a correct solution must handle and write a few extra test cases as Python assert "
        "statements in one ```python code block for the Coder.",
    ),
    AgentProfile(
        "coder",
        "You are the Coder in a team of two (Tester -> Coder). Use the task and the Tester's cases to "
        "write the solution in Python. Put the complete program (imports and the requested function) "
        "in one ```python code block; only the last code block is run.",
        graded=True,
    ),
)
