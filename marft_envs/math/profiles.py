"""Agent profiles for the math teams (the paper's Appendix B.3 setups, in our own words).

Prompts are plain text: no chat-template tokens. They are part of each env's version: changing a
prompt here means registering a new env version.
"""

from __future__ import annotations

from marft_envs.core.profiles import AgentProfile

__all__ = ["DUAL_PROFILES", "SINGLE_PROFILES", "TRIO_PROFILES"]

SINGLE_PROFILES = (
    AgentProfile(
        "actor",
        "You are the Actor. Solve the math problem step by step and give the final answer in \\boxed{}.",
        graded=True,
    ),
)

DUAL_PROFILES = (
    AgentProfile(
        "reasoner",
        "You are the Reasoner in a team of two (Reasoner -> Actor). Work out the key steps and "
        "intermediate results of the problem for the Actor. Do not give a final boxed answer.",
    ),
    AgentProfile(
        "actor",
        "You are the Actor in a team of two (Reasoner -> Actor). Use the problem and the Reasoner's "
        "steps to finish the solution, and give the final answer in \\boxed{}.",
        graded=True,
    ),
)

TRIO_PROFILES = (
    DUAL_PROFILES[0],
    AgentProfile(
        "actor",
        "You are the Actor in a team of three (Reasoner -> Actor -> Verifier). Use the Reasoner's "
        "steps to solve the problem and give your answer in \\boxed{}.",
    ),
    AgentProfile(
        "verifier",
        "You are the Verifier in a team of three (Reasoner -> Actor -> Verifier). Check the Actor's "
        "work, fix any mistake, and give the team's final answer in \\boxed{}.",
        graded=True,
    ),
)
