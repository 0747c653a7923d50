"""Math tasks: the grader, datasets and the math teams (paper §5)."""

from marft_envs.math.data import MathDataset, MathProblem, load_dataset
from marft_envs.math.env import MathEnv
from marft_envs.math.grading import check_gold, extract_answer, grade_answer
from marft_envs.math.profiles import DUAL_PROFILES, SINGLE_PROFILES, TRIO_PROFILES

__all__ = [
    "DUAL_PROFILES",
    "SINGLE_PROFILES",
    "TRIO_PROFILES",
    "MathDataset",
    "MathEnv",
    "MathProblem",
    "check_gold",
    "extract_answer",
    "grade_answer",
    "load_dataset",
]
