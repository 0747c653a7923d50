"""Held-out evaluation: greedy decoding over a fixed list of episodes.

Episodes are pinned so that every evaluation of a run sees the same tasks: for envs with a
``dataset`` (the math tasks) episode ``i`` is problem ``i`` of the split (``reset(options={"index":
i})``); otherwise episode ``i`` uses ``reset(seed=EVAL_SEED_OFFSET + i)``, a seed that training
never draws (training seeds are below ``2**31 - 1``), so the held-out episodes are held out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from marft_algos.rollout import Episode, EpisodeRequest, GenerationSettings, RolloutCollector

__all__ = ["EVAL_SEED_OFFSET", "evaluation_requests", "summarize_episodes"]

#: First reset seed of held-out episodes of envs without a dataset (outside the training range).
EVAL_SEED_OFFSET = 2**31


def evaluation_requests(collector: RolloutCollector, num_episodes: int) -> list[EpisodeRequest]:
    """The pinned episodes of a held-out evaluation."""
    base = collector.envs[0].unwrapped
    dataset = getattr(base, "dataset", None)
    if dataset is not None:
        num_episodes = min(num_episodes, len(dataset))
        return [EpisodeRequest(seed=i, options={"index": i}) for i in range(num_episodes)]
    return [EpisodeRequest(seed=EVAL_SEED_OFFSET + i) for i in range(num_episodes)]


def _correct(episode: Episode) -> bool:
    if "correct" in episode.info:
        return bool(episode.info["correct"])
    return episode.team_return > 0


def summarize_episodes(episodes: Sequence[Episode], prefix: str) -> dict[str, Any]:
    """Accuracy overall and per graded agent, mean team return and action length."""
    if not episodes:
        return {}
    n = len(episodes)
    metrics: dict[str, Any] = {
        f"{prefix}/accuracy": sum(_correct(e) for e in episodes) / n,
        f"{prefix}/reward_mean": sum(e.team_return for e in episodes) / n,
    }
    per_agent: dict[str, list[bool]] = {}
    for e in episodes:
        for agent, ok in e.info.get("graded", {}).items():
            per_agent.setdefault(agent, []).append(bool(ok))
    for agent, oks in sorted(per_agent.items()):
        metrics[f"{prefix}/accuracy/{agent}"] = sum(oks) / len(oks)
    decisions = [d for e in episodes for d in e.decisions]
    if decisions:
        metrics[f"{prefix}/action_tokens_mean"] = sum(len(d.action_ids) for d in decisions) / len(decisions)
        metrics[f"{prefix}/action_cut_fraction"] = sum(not d.finished for d in decisions) / len(decisions)
    return metrics


def greedy(settings: GenerationSettings) -> GenerationSettings:
    """The same settings with greedy decoding."""
    return dataclasses.replace(settings, top_p=1.0, top_k=0, do_sample=False)
