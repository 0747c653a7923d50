"""Code tasks: a sandbox for untrusted programs, MBPP/HumanEval loaders, a generator, code teams."""

from marft_envs.code.data import (
    CodeDataError,
    CodeDataset,
    CodeProblem,
    load_dataset,
    load_humaneval,
    load_mbpp,
)
from marft_envs.code.env import CodeEnv
from marft_envs.code.grading import Grade, extract_program
from marft_envs.code.profiles import DUAL_PROFILES, SINGLE_PROFILES
from marft_envs.sandbox.runner import (
    Sandbox,
    SandboxLimits,
    SandboxResult,
    UnitTests,
    default_sandbox,
)

__all__ = [
    "DUAL_PROFILES",
    "SINGLE_PROFILES",
    "CodeDataError",
    "CodeDataset",
    "CodeEnv",
    "CodeProblem",
    "Grade",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "UnitTests",
    "default_sandbox",
    "extract_program",
    "load_dataset",
    "load_humaneval",
    "load_mbpp",
]
