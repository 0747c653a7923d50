"""Rollouts: the collector that steps env copies and batches generation across them
(:mod:`~marft_algos.rollout.collector`), held-out evaluation and its statistics
(:mod:`~marft_algos.rollout.evaluation`), and the vLLM backend (:mod:`~marft_algos.rollout.vllm`)."""

from marft_algos.rollout.collector import (
    Decision,
    Episode,
    EpisodeRequest,
    GenerationSettings,
    RolloutCollector,
)

__all__ = ["Decision", "Episode", "EpisodeRequest", "GenerationSettings", "RolloutCollector"]
