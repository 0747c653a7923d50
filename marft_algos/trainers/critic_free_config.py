"""The settings of the critic-free trainers (GRPO, RLOO, REINFORCE++): ``CriticFreeConfig``, its
action-or-token-level variant, and the token-level loss normalizers they choose between."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from marft_algos.common.losses import Normalizer
from marft_algos.trainers.branched import tree_size
from marft_algos.trainers.config import TrainerConfig, check_clip_range, check_num_minibatches
from marft_algos.trainers.paper_departures import warn_departures

__all__ = [
    "LOSS_NORMALIZERS",
    "CriticFreeConfig",
    "CriticFreeLevelConfig",
    "check_level_options",
]

#: Token-level ``loss_type`` (TRL's names) → how the per-token losses are weighted.
LOSS_NORMALIZERS: dict[str, Normalizer] = {
    "grpo": "sequence",
    "bnpo": "token",
    "dapo": "token",
    "dr_grpo": "constant",
}


@dataclass
class CriticFreeConfig(TrainerConfig):
    """Settings shared by the critic-free trainers (names as TRL's ``GRPOConfig``/``RLOOConfig``)."""

    num_generations: int = 8
    """Episodes per task (the group size G, or K)."""
    beta: float = 0.0
    """Weight of the KL to the reference policy (the base model with adapters disabled); 0: no
    reference forward pass."""
    epsilon: float = 0.2
    """Lower clip range ε_low."""
    epsilon_high: float | None = None
    """Upper clip range ε_high (DAPO clip-higher, e.g. 0.28); None: equal to epsilon."""
    loss_type: Literal["grpo", "bnpo", "dapo", "dr_grpo"] = "dapo"
    """Token-level loss aggregation: per-sequence means (grpo), every token of the batch once (dapo;
    bnpo too, over the whole batch rather than TRL's per-micro-batch count, so the gradient does not
    depend on gradient_accumulation_steps), or each agent's token cap as a constant length
    (dr_grpo). The entropy bonus and a KL loss term are aggregated the same way. With
    importance_sampling_level='sequence' only grpo is GSPO's objective; the others weight each
    sequence by its length (a warning says so)."""
    num_iterations: int = 1
    """Optimisation passes over each batch (μ; TRL's name). Not --iterations, which counts rollout-and-update iterations."""
    num_minibatches: int = 1
    """Optimizer steps per pass: the batch's episodes are shuffled and split into this many
    minibatches (TRL's ``steps_per_generation``); each minibatch's loss is aggregated over its own
    tokens or sequences (advantages are computed once, over the whole batch)."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and sample more groups to refill the batch."""
    max_resample_rounds: int = 4
    """With dynamic sampling: extra sampling rounds at most before training on a short batch."""
    reward_source: Literal["team", "agent"] = "team"
    """R_i of an agent: the episode's team return, or the agent's own credited return."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (>= 0; none by default)."""
    importance_sampling_level: Literal["token", "sequence"] = "token"
    """One PPO ratio per token, or one per sequence (GSPO; TRL's name and definition): the
    geometric mean of its tokens' ratios, clipped once and shared by its tokens, which loss_type
    then aggregates as token losses. Token level only: level='action' has one ratio per decision.
    A sequence is one decision, so an agent that acts twice in an episode gets two ratios. GSPO's
    objective needs loss_type='grpo' (the default dapo weights sequences by length); its
    clip_fraction and ratio_mean average over tokens, where TRL's average over sequences."""
    skip_zero_advantages: bool = True
    """Skip the forward and backward pass of completions whose advantage is 0: with ``beta=0``
    and no entropy bonus they add exactly nothing to the gradient. An agent left with no
    completion to run in a minibatch still takes its optimizer step, on a zero gradient, so
    skipping saves compute and changes nothing else (Adam's momentum moves the weights on such a
    step). False runs every completion through the update, as TRL does (equal-work comparisons)."""

    min_generations: ClassVar[int] = 2
    """Smallest group this estimator works with (a baseline from the group needs two)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_clip_range(self.epsilon, self.epsilon_high)
        least = 1 if self.branch else self.min_generations  # a tree holds its own baselines
        if self.num_generations < least:
            raise ValueError(
                f"num_generations must be >= {least} (a group needs a baseline), got "
                f"{self.num_generations}."
            )
        if self.episodes_per_iteration % self.num_generations:
            raise ValueError(
                f"episodes_per_iteration={self.episodes_per_iteration} must be a multiple of "
                f"num_generations={self.num_generations}; e.g. set episodes_per_iteration="
                f"{self.num_generations * max(1, self.episodes_per_iteration // self.num_generations)}."
            )
        if self.loss_type not in LOSS_NORMALIZERS:
            raise ValueError(
                f"loss_type must be one of {tuple(LOSS_NORMALIZERS)}, got {self.loss_type!r}."
            )
        if self.reward_source not in ("team", "agent"):
            raise ValueError(
                f"reward_source must be 'team' or 'agent', got {self.reward_source!r}."
            )
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}.")
        if self.entropy_coef < 0:
            raise ValueError(
                f"entropy_coef must be >= 0 (the weight of an entropy bonus), got "
                f"{self.entropy_coef}; set entropy_coef=0 to train without one."
            )
        if self.importance_sampling_level not in ("token", "sequence"):
            raise ValueError(
                f"importance_sampling_level must be 'token' or 'sequence', got "
                f"{self.importance_sampling_level!r}."
            )
        if self.num_iterations < 1:
            raise ValueError(f"num_iterations must be >= 1, got {self.num_iterations}.")
        if isinstance(self.max_resample_rounds, bool) or self.max_resample_rounds < 0:
            raise ValueError(
                f"max_resample_rounds must be >= 0 (0: never resample), got "
                f"{self.max_resample_rounds}."
            )
        check_num_minibatches(self.num_minibatches, self.episodes_per_iteration)
        if self.dynamic_sampling and self.episodes_per_task < 2:
            raise ValueError(
                "dynamic_sampling drops groups whose rewards are all equal, which a group of one "
                "always is; set num_generations >= 2 or dynamic_sampling=False."
            )
        warn_departures(self)  # GSPO with a loss_type other than grpo (docs/maths.md)

    @property
    def groups_per_iteration(self) -> int:
        return self.episodes_per_iteration // self.episodes_per_task

    @property
    def episodes_per_task(self) -> int:
        """Episodes of one task: num_generations, times a branch tree's size with branch."""
        return self.num_generations * tree_size(self.branch)


def check_level_options(config: Any) -> None:
    """Validate ``level`` / ``logprob_normalization`` of a config that offers both granularities,
    refusing options the chosen level would ignore."""
    if config.level not in ("action", "token"):
        raise ValueError(f"level must be 'action' or 'token', got {config.level!r}.")
    if config.logprob_normalization not in ("none", "token", "word"):
        raise ValueError(
            f"logprob_normalization must be 'none', 'token' or 'word', got "
            f"{config.logprob_normalization!r}."
        )
    if config.level == "token" and config.logprob_normalization != "none":
        raise ValueError(
            f"logprob_normalization={config.logprob_normalization!r} divides an action's log-prob, "
            f"which only level='action' uses; set level='action' or drop logprob_normalization."
        )
    if config.level == "action" and config.importance_sampling_level != "token":
        raise ValueError(
            f"importance_sampling_level={config.importance_sampling_level!r} shares one ratio "
            f"among a sequence's tokens, but level='action' already has one ratio per decision "
            f"(with logprob_normalization='token' it is the same geometric mean); set "
            f"level='token' or drop importance_sampling_level."
        )
    if config.level == "action" and config.loss_type != "dapo":
        raise ValueError(
            f"loss_type={config.loss_type!r} weights tokens, but level='action' has one ratio per "
            f"decision and averages over decisions; set level='token' or drop loss_type."
        )


@dataclass
class CriticFreeLevelConfig(CriticFreeConfig):
    """A critic-free config that trains at action or token level (RLOO, REINFORCE++)."""

    level: Literal["action", "token"] = "token"
    """One clipped ratio per decision (on the action's log-prob, paper eq. 6) or per token."""
    logprob_normalization: Literal["none", "token", "word"] = "none"
    """Action level: divide an action's log-prob by its token or word count (paper §4.1.1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_level_options(self)
