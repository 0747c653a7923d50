"""Agent profiles of the debate team.

Prompts are plain text: no chat-template tokens. They are part of each env's version: changing a
prompt here means registering a new env version.
"""

from __future__ import annotations

from marft_envs.core.profiles import AgentProfile

__all__ = ["DEBATE_TEAMS"]


def _solver(letter: str) -> AgentProfile:
    return AgentProfile(
        f"solver_{letter.lower()}",
        f"You are Solver {letter} in a debate (Solver A, Solver B, then a Judge). Solve the math "
        "problem step by step and give your final answer in \\boxed{}. When the judge asks for a "
        "rebuttal, read the other answers, then defend or correct yours, again ending in \\boxed{}.",
    )


DEBATE_TEAMS: dict[str, tuple[AgentProfile, ...]] = {
    "debate": (
        _solver("A"),
        _solver("B"),
        AgentProfile(
            "judge",
            "You are the Judge of a debate between Solver A and Solver B on a math problem. Check "
            "their answers and reasoning. End your reply with one line: 'Verdict: A' or 'Verdict: B' "
            "to adopt that solver's answer as the team's final answer, or 'Verdict: rebut A', "
            "'Verdict: rebut B' or 'Verdict: rebut both' to ask for another round (not in the last "
            "round).",
            graded=True,
        ),
    ),
}
