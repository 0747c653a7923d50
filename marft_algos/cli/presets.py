"""Defaults the command line applies on top of the config classes' paper defaults.

The config classes keep the paper's Table 3 values; a CPU run of the built-in model wants a
different budget. :func:`preset_for` is the one place that chooses a preset for a model, so a
model-size-aware choice slots in here.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ALGORITHM_EXCEPTIONS",
    "DEFAULT_MODEL",
    "DEMO_DEFAULTS",
    "MODEL_PRESETS",
    "PRESETS",
    "PRETRAINED_DEFAULTS",
    "SMOLLM2_DEFAULTS",
    "choose_preset",
    "preset_for",
    "scale_for_world",
]

DEFAULT_MODEL = "marft-tiny-math"

#: The CPU demo preset, chosen for the built-in model (measured in docs/builtin_model.md): 40
#: iterations of 64 episodes, two passes over each batch (PPO epochs; the critic-free trainers'
#: num_iterations), a 32-token message budget per agent (the actor only writes \\boxed{}, so 8),
#: greedy and sampled held-out evaluation on 200 problems.
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

#: A real pretrained instruct LLM of 0.1-1B parameters: the CPU demo preset's learning rate (1e-3)
#: and two passes per batch blow such a model up after one update (approx-KL ~1e5 measured on
#: SmolLM2-135M), so LoRA-sized steps, one pass per batch, and a budget that fits whole solutions.
PRETRAINED_DEFAULTS: dict[str, Any] = {
    "iterations": 20,
    "episodes_per_iteration": 16,
    "rollout_threads": 16,
    "max_new_tokens": 256,
    "learning_rate": 2e-5,
    "critic_learning_rate": 1e-4,
    "ppo_epochs": 1,
    "num_iterations": 1,
    "entropy_coef": 0.0,
    "eval_every": 5,
    "eval_episodes": 64,
    "num_generations": 4,
    # A whole batch's forward + backward at once needs tens of GB on a 135M model (64 rows of
    # ~130 tokens were killed at 22 GB measured); four chunks give the same gradient.
    "gradient_accumulation_steps": 4,
}

#: SmolLM2-135M-Instruct on a CPU (measured in benchmarks/real_model/RESULTS.md): rollouts at
#: temperature 0.5 (at 1.0 this 135M model's samples are mostly off-topic and never solve a
#: problem), short actions (it writes long derivations; 48 tokens, the actor 24, keep rollouts
#: cheap), groups of 8 for GRPO, and a learning rate LoRA tolerates on this model.
SMOLLM2_DEFAULTS: dict[str, Any] = {
    **PRETRAINED_DEFAULTS,
    "iterations": 12,
    "episodes_per_iteration": 48,
    "rollout_threads": 48,
    "max_new_tokens": 48,
    "max_new_tokens_per_agent": {"actor": 24},
    "temperature": 0.5,
    "learning_rate": 1e-4,
    "eval_every": 0,
    "num_generations": 8,
    # A later agent's observation holds the earlier agents' messages, so a share of the batch can
    # be several times wider than the first agent's: action-level MARFT on code-dual-v2 (64
    # episodes, 128-token messages) was killed at 22 GB in its first update with four chunks per
    # share. A bound on each chunk's padded tokens holds whatever the widths.
    "max_chunk_tokens": 2048,
}

#: Preset name -> command-line defaults; "paper" keeps every config class's own (paper Table 3) defaults.
PRESETS: dict[str, dict[str, Any]] = {
    "cpu-demo": DEMO_DEFAULTS,
    "smollm2-cpu": SMOLLM2_DEFAULTS,
    "pretrained": PRETRAINED_DEFAULTS,
    "paper": {},
}

#: Algorithm -> preset fields it does not take: REINFORCE++ keeps its paper's one sample per task
#: (its config default) instead of the presets' GRPO/RLOO group sizes; every other field applies.
ALGORITHM_EXCEPTIONS: dict[str, tuple[str, ...]] = {"reinforce-pp": ("num_generations",)}

#: The preset a model gets when --preset is not given (any other model: "pretrained").
MODEL_PRESETS: dict[str, str] = {
    "marft-tiny-math": "cpu-demo",
    "smollm2-135m-instruct": "smollm2-cpu",
}


def choose_preset(model: str, preset: str | None = None, *, paper_defaults: bool = False) -> str:
    """The preset's name: the one asked for, else the model's own, else ``"pretrained"``."""
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"--preset {preset!r} is not a preset; choose one of {sorted(PRESETS)}.")
    if paper_defaults:
        if preset not in (None, "paper"):
            raise ValueError(f"--paper-defaults contradicts --preset {preset}; pass one of them.")
        return "paper"
    return preset or MODEL_PRESETS.get(model, "pretrained")


def preset_for(
    model: str,
    *,
    paper_defaults: bool = False,
    preset: str | None = None,
    algorithm: str | None = None,
) -> dict[str, Any]:
    """The config defaults the command line uses for ``model`` (empty: the paper's defaults).

    Args:
        model: The ``--model`` value.
        paper_defaults: ``--paper-defaults``: keep the config classes' defaults.
        preset: ``--preset``: a preset by name instead of the model's own.
        algorithm: ``--algo``: leaves out the preset fields that algorithm keeps at its own
            default (:data:`ALGORITHM_EXCEPTIONS`).
    """
    chosen = PRESETS[choose_preset(model, preset, paper_defaults=paper_defaults)]
    skip = ALGORITHM_EXCEPTIONS.get(algorithm or "", ())
    return {k: dict(v) if isinstance(v, dict) else v for k, v in chosen.items() if k not in skip}


def scale_for_world(
    values: dict[str, Any], given: set[str], world_size: int
) -> tuple[dict[str, Any], str | None]:
    """Episodes per iteration for ``world_size`` processes, unless the user chose them.

    Presets (and the config classes' defaults) size one process's work. Under a launcher every
    process takes a share of ``episodes_per_iteration``, so an unscaled preset would give each of
    8 GPUs an eighth of one GPU's rollouts (or fewer groups than processes: GRPO's 16 episodes in
    groups of 4 cannot be shared by 8). Each process keeps the preset's episodes, so the
    iteration collects ``world_size`` times as many; ``rollout_threads`` is per process already.

    Returns:
        The values (scaled copy or unchanged) and a line saying what changed, or None.
    """
    if world_size <= 1 or "episodes_per_iteration" in given:
        return values, None
    per_process = int(values["episodes_per_iteration"])
    scaled = {**values, "episodes_per_iteration": per_process * world_size}
    note = (
        f"{world_size} processes: episodes per iteration {per_process} -> "
        f"{per_process * world_size} ({per_process} per process, as on one); set "
        f"--episodes-per-iteration to choose the total yourself"
    )
    return scaled, note
