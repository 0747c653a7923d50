"""A team where one agent's choice decides whether the rest can succeed (``choice-team-v1``)."""

from marft_envs.choice.env import CHOICE_PROFILES, ChoiceEnv
from marft_envs.choice.tasks import OPERATIONS, ChoiceTask, parse_choice

__all__ = ["CHOICE_PROFILES", "OPERATIONS", "ChoiceEnv", "ChoiceTask", "parse_choice"]
