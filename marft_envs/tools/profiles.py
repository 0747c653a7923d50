"""Agent profiles of the tool-using math teams.

Prompts are plain text: no chat-template tokens. They are part of each env's version: changing a
prompt here means registering a new env version. ``metadata={"tools": True}`` marks the agents
whose ``<python>`` calls are run.
"""

from __future__ import annotations

from marft_envs.core.profiles import AgentProfile

__all__ = ["TOOL_TEAMS"]

_TOOL = (
    "To calculate, write one Python expression between <python> and </python>, e.g. "
    "<python>(17 * 23) / 4</python>, and stop; its value comes back in your next message. math and "
    "Fraction are available. Tool calls are limited."
)

TOOL_TEAMS: dict[str, tuple[AgentProfile, ...]] = {
    "single": (
        AgentProfile(
            "actor",
            f"You are the Actor. Solve the math problem. {_TOOL} When you know the answer, give it "
            "in \\boxed{}; a reply with \\boxed{} is your final answer.",
            graded=True,
            metadata={"tools": True},
        ),
    ),
    "dual": (
        AgentProfile(
            "caller",
            f"You are the Caller in a team of two (Caller -> Answerer). You run the calculations for "
            f"the team. {_TOOL} When the calculations are done, reply without <python> tags: write "
            "the results the Answerer needs, and the Answerer then gives the final answer.",
            metadata={"tools": True},
        ),
        AgentProfile(
            "answerer",
            "You are the Answerer in a team of two (Caller -> Answerer). Use the problem, the tool "
            "results and the Caller's notes to give the final answer in \\boxed{}.",
            graded=True,
        ),
    ),
}
