"""Defaults the command line applies on top of the config classes' paper defaults.

The config classes keep the paper's Table 3 values; a CPU run of the built-in model wants a
different budget. :func:`preset_for` is the one place that chooses a preset for a model, so a
model-size-aware choice slots in here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_MODEL", "DEMO_DATA", "DEMO_DEFAULTS", "preset_for"]

DEFAULT_MODEL = "marft-tiny-math"

#: The CPU demo preset, chosen for the built-in model (measured in docs/builtin_model.md): 40
#: iterations of 64 episodes, two passes over each batch (PPO epochs; GRPO's num_iterations), a
#: 32-token message budget per agent (the actor only writes \\boxed{}, so 8), greedy and sampled
#: held-out evaluation on 200 problems.
DEMO_DEFAULTS: dict[str, Any] = {
    "iterations": 40,
    "episodes_per_iteration": 64,
    "rollout_threads": 64,
    "max_new_tokens": 32,
    "max_new_tokens_per_agent": {"actor": 8},
    "learning_rate": 1e-3,
    "critic_learning_rate": 1e-3,
    "ppo_epochs": 2,
    "num_iterations": 2,
    "entropy_coef": 0.0,
    "eval_every": 10,
    "eval_episodes": 200,
    "eval_sampled": True,
    "num_generations": 4,
}

#: The built-in problems the built-in model was trained on (applied to built-in data only): the
#: ``digits`` family (single-digit operands, one to three operations), see docs/builtin_model.md.
DEMO_DATA: dict[str, Any] = {"levels": [1, 2, 3], "subjects": ["digits"]}


def preset_for(model: str, *, paper_defaults: bool = False) -> dict[str, Any]:
    """The config defaults the command line uses for ``model`` (empty: the paper's defaults).

    Args:
        model: The ``--model`` value.
        paper_defaults: ``--paper-defaults``: keep the config classes' defaults.
    """
    if paper_defaults:
        return {}
    return {
        **DEMO_DEFAULTS,
        "max_new_tokens_per_agent": dict(DEMO_DEFAULTS["max_new_tokens_per_agent"]),
    }
