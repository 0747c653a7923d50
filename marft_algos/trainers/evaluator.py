"""The trainer's held-out evaluation and its statistics over every rank's episodes."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from marft_algos.distributed import DistributedContext
from marft_algos.rollout.collector import Episode, RolloutCollector
from marft_algos.rollout.evaluation import (
    episode_outcomes,
    evaluation_requests,
    greedy,
    no_signal_reason,
    summarize_episodes,
    unpaid_agents_reason,
)
from marft_algos.runs.folder import RunDirectory
from marft_algos.runs.metrics import MetricsLogger
from marft_algos.runs.outcomes import write_outcomes
from marft_algos.runs.samples import transcripts_markdown, write_samples
from marft_algos.runs.tracing import EpisodeTracer, NoTracer
from marft_algos.trainers.config import TrainerConfig
from marft_algos.trainers.failures import report_failures

__all__ = ["Evaluator", "flag_no_signal", "summarize", "warn_unpaid_agents"]

logger = logging.getLogger("marft_algos.trainers.base")


def summarize(episodes: Sequence[Episode], prefix: str, dist: DistributedContext) -> dict[str, Any]:
    """:func:`summarize_episodes` over every rank's episodes (this process's alone if one)."""
    if not dist.enabled:
        return summarize_episodes(episodes, prefix)
    gathered = dist.gather([_light(e) for e in episodes])
    return summarize_episodes([e for part in gathered for e in part], prefix)


#: Added to a run's first "nothing to learn" warning: the usual cause with a real model is a
#: prompt the model does not follow.
PROMPT_HINT = (
    " If the model never writes the answer format the env grades, give the agents prompts it "
    "follows: marft train --profiles FILE (docs/cli.md), or system_prompts= and "
    "message_layout='user' in marft_envs.make."
)


def flag_no_signal(
    episodes: Sequence[Episode],
    metrics: dict[str, Any],
    iteration: int,
    dist: DistributedContext,
    *,
    hint: bool = False,
) -> bool:
    """Flag (``rollout/nothing_to_learn``) and warn when the iteration's rewards carry no signal;
    ``hint`` adds how to change the prompts (the run's first such warning). Returns whether it
    warned."""
    rewards = [d.reward for e in episodes for d in e.decisions]
    spread = (min(rewards), max(rewards)) if rewards else (0.0, 0.0)
    if dist.enabled:
        parts = dist.gather(spread)
        spread = (min(p[0] for p in parts), max(p[1] for p in parts))
    considered = int(dist.sum([len(episodes)])[0])  # the episodes trained on, failed ones left out
    why = no_signal_reason(spread, metrics, iteration, considered)
    metrics["rollout/nothing_to_learn"] = int(why is not None)
    if why is not None:
        logger.warning(why + (PROMPT_HINT if hint else ""))
    return why is not None


def warn_unpaid_agents(episodes: Sequence[Episode], env: Any, config: TrainerConfig) -> None:
    """Warn when the env's credit rule lets no reward reach some agent's decisions (checked on the
    run's first episodes; critic-free trainers on the team return never are affected)."""
    source = getattr(config, "reward_source", None)
    if source == "team":
        return
    base = env.unwrapped
    profiles = getattr(base, "profiles", {})
    graded = {name: bool(getattr(p, "graded", False)) for name, p in profiles.items()}
    why = unpaid_agents_reason(
        episodes, getattr(base, "credit", None), graded, own_return=source == "agent"
    )
    if why is not None:
        logger.warning(why)


class Evaluator:
    """Greedy held-out evaluation on pinned episodes, plus a sampled one with ``eval_sampled``.

    With several processes each runs a share of the pinned episodes and the metrics cover all of
    them; rank 0 writes the transcripts (``samples.jsonl``) and their TensorBoard text. With a
    ``tracer`` every process sends its episodes' traces (``marft.split`` ``eval``, ``eval_sampled``).
    """

    def __init__(
        self,
        policy: Any,
        env_fn: Callable[[], Any],
        config: TrainerConfig,
        dist: DistributedContext,
        tracer: EpisodeTracer | NoTracer | None = None,
    ) -> None:
        self.config = config
        self.dist = dist
        self.tracer = tracer if tracer is not None else NoTracer()
        self.collector = RolloutCollector.from_factory(
            policy, env_fn, config.rollout_threads, config.generation, seed=config.seed
        )

    def evaluate(
        self,
        iteration: int,
        run_dir: RunDirectory | None,
        metrics_logger: MetricsLogger,
        phase: Callable[[str, int], None],
    ) -> dict[str, Any]:
        requests = evaluation_requests(self.collector, self.config.eval_episodes)
        shard = self.dist.shard(len(requests))
        requests = [requests[i] for i in shard]
        phase("eval", len(requests))
        episodes = self.collector.collect(requests, greedy(self.config.generation))
        first, env = shard.start, self.collector.envs[0]
        self.tracer.record(episodes, iteration, "eval", first_index=first, env=env)
        metrics = summarize(episodes, "eval", self.dist)
        self._report_failures(episodes, iteration, run_dir, "eval")
        self._keep_outcomes(run_dir, iteration, "eval", episodes)
        if run_dir is not None and self.dist.is_main and self.config.eval_samples:
            rows = write_samples(run_dir.path, iteration, episodes, self.config.eval_samples)
            metrics_logger.log_text("eval/samples", transcripts_markdown(rows), iteration)
        if self.config.eval_sampled:
            phase("eval (sampled)", len(requests))
            episodes = self.collector.collect(requests, self.config.generation)
            self.tracer.record(episodes, iteration, "eval_sampled", first_index=first, env=env)
            metrics.update(summarize(episodes, "eval_sampled", self.dist))
            self._report_failures(episodes, iteration, run_dir, "eval_sampled")
            self._keep_outcomes(run_dir, iteration, "eval_sampled", episodes)
        return metrics

    def _report_failures(
        self, episodes: Sequence[Episode], iteration: int, run_dir: RunDirectory | None, split: str
    ) -> None:
        """The failed held-out episodes: one console line and their transcripts, as in training."""
        when = f"Held-out evaluation ({split}) at iteration {iteration}"
        what = f"counted wrong in {split}/accuracy, left out of {split}/reward_mean"
        folder = run_dir.path if run_dir is not None else None
        report_failures(episodes, when, what, folder, self.dist, iteration, split)

    def _keep_outcomes(
        self, run_dir: RunDirectory | None, iteration: int, prefix: str, episodes: Sequence[Episode]
    ) -> None:
        """Append every rank's per-episode outcomes to the run folder (paired before/after)."""
        rows = episode_outcomes(episodes)
        if self.dist.enabled:
            rows = [r for part in self.dist.gather(rows) for r in part]
        if run_dir is not None and self.dist.is_main:
            write_outcomes(run_dir.path, iteration, prefix, rows)


def _light(episode: Episode) -> Episode:
    """An episode without prompts, log-probs or messages: what the metrics read, cheap to gather."""
    decisions = [
        dataclasses.replace(d, prompt_ids=[], log_probs=[], messages=[]) for d in episode.decisions
    ]
    return dataclasses.replace(episode, decisions=decisions)
