"""Debate: two solvers answer a math problem, a judge's verdict decides who speaks and what is final."""

from marft_envs.debate.env import DebateEnv, JudgeSchedule
from marft_envs.debate.verdict import Verdict, parse_verdict

__all__ = ["DebateEnv", "JudgeSchedule", "Verdict", "parse_verdict"]
