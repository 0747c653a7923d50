"""Held-out evaluation: greedy decoding over a fixed list of episodes.

Episodes are pinned so that every evaluation of a run sees the same tasks: for envs with a
``dataset`` (the math tasks) episode ``i`` is problem ``i`` of the split (``reset(options={"index":
i})``); otherwise episode ``i`` uses ``reset(seed=EVAL_SEED_OFFSET + i)``, a seed that training
never draws (training seeds are below ``2**31 - 1``), so the held-out episodes are held out.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from marft_algos.protocols import GenerationSettings, Messages
from marft_algos.rollout.collector import Episode, EpisodeRequest, RolloutCollector
from marft_algos.rollout.failures import failure_kind, failure_metrics, finished_episodes

__all__ = [
    "EVAL_SEED_OFFSET",
    "NoisyMessages",
    "agent_metrics",
    "episode_correct",
    "episode_outcomes",
    "evaluation_requests",
    "format_accuracy",
    "format_change",
    "no_signal_reason",
    "standard_error",
    "summarize_episodes",
    "unpaid_agents_reason",
]

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


def episode_correct(episode: Episode) -> bool:
    """Whether the team succeeded: never for a failed episode (whatever it was paid), else the
    final round's ``info["correct"]``, else a positive return."""
    if failure_kind(episode) is not None:
        return False
    if "correct" in episode.info:
        return bool(episode.info["correct"])
    return episode.team_return > 0


def episode_outcomes(episodes: Sequence[Episode]) -> list[dict[str, Any]]:
    """Each episode's task (reset seed and options), whether the team was right and its return:
    what pairs two evaluations of the same held-out episodes
    (:func:`~marft_algos.rollout.paired.paired_outcomes`)."""
    return [
        {
            "seed": e.seed,
            "options": dict(e.options),
            "correct": episode_correct(e),
            "team_return": e.team_return,
        }
        for e in episodes
    ]


def standard_error(accuracy: float, n: int) -> float:
    """Binomial standard error of an accuracy measured on ``n`` episodes."""
    return math.sqrt(max(accuracy * (1.0 - accuracy), 0.0) / n) if n > 0 else float("nan")


def format_accuracy(accuracy: float, n: int | None) -> str:
    """``0.375 ± 0.171 (n=8)``: an accuracy with its standard error and episode count."""
    if not n:
        return f"{accuracy:.3f}"
    return f"{accuracy:.3f} ± {standard_error(accuracy, n):.3f} (n={n})"


def format_change(before: float, n_before: int | None, after: float, n_after: int | None) -> str:
    """``+12.5 ± 24.2 points``: a change of accuracy with the standard error of the difference
    (the two evaluations taken as independent samples)."""
    points = 100 * (after - before)
    if not n_before or not n_after:
        return f"{points:+.1f} points"
    se = 100 * math.hypot(standard_error(before, n_before), standard_error(after, n_after))
    return f"{points:+.1f} ± {se:.1f} points"


def no_signal_reason(
    reward_range: tuple[float, float],
    metrics: Mapping[str, Any],
    iteration: int,
    episodes: int | None = None,
) -> str | None:
    """Why an iteration has nothing to learn from, or None when its rewards carry a signal.

    Args:
        reward_range: The smallest and largest reward of any decision of the iteration.
        metrics: The iteration's metrics (``rollout/zero_std_fraction`` from GRPO,
            ``rollout/episodes``).
        iteration: The iteration's number, for the message.
        episodes: The episodes whose rewards were considered (default ``rollout/episodes``;
            fewer when failed episodes were left out of the update).
    """
    n = metrics.get("rollout/episodes") if episodes is None else episodes
    count = "" if n is None else f"{n} "  # "of its 96 episodes", "of all 96 episodes"
    if metrics.get("rollout/zero_std_fraction") == 1.0:
        why = (
            f"of its {count}episodes, every group's samples got the same reward "
            f"(rollout/zero_std_fraction 1.0), so every advantage is 0 and the update is empty"
        )
    elif reward_range[0] == reward_range[1]:
        why = (
            f"every decision of all {count or 'the '}episodes got reward {reward_range[0]:g}, so "
            f"any change of the policy comes from the critic's value errors, not from the task"
        )
    else:
        return None
    return (
        f"Iteration {iteration} has nothing to learn from: {why}. Try easier problems, more "
        f"episodes or samples per group, a higher temperature, or check the reward."
    )


def unpaid_agents_reason(
    episodes: Sequence[Episode], rule: Any, graded: Mapping[str, bool], *, own_return: bool
) -> str | None:
    """Why some agent's decisions can receive no reward under the env's credit rule, or None.

    Under ``"graded"`` an agent whose profile is not graded is never paid, and under ``"last"``
    an agent is paid only as its round's last agent. Such a decision still learns when a paid
    decision follows it in the episode (the return and the values carry the reward back), unless
    the trainer uses each agent's own return (``own_return``: critic-free ``reward_source="agent"``).
    Other rules (``"team"``, a callable) and direct per-agent rewards are not judged here.

    Args:
        episodes: The first iteration's episodes.
        rule: The env's ``credit`` rule.
        graded: Whether each agent's profile is graded.
        own_return: Each agent learns from its own credited return only.
    """
    if rule not in ("graded", "last"):
        return None

    def payable(decision: Any) -> bool:
        return graded.get(decision.agent, False) if rule == "graded" else decision.round_end

    unreached: dict[str, list[int]] = {}  # agent -> [decisions no reward reaches, decisions]
    for episode in episodes:
        decisions = episode.decisions
        for i, decision in enumerate(decisions):
            counts = unreached.setdefault(decision.agent, [0, 0])
            counts[1] += 1
            if payable(decision):
                continue
            if own_return or not any(payable(later) for later in decisions[i + 1 :]):
                counts[0] += 1
    named = {agent: counts for agent, counts in unreached.items() if counts[0]}
    if not named:
        return None
    pays = "graded agents only" if rule == "graded" else "each round's last agent only"
    parts = ", ".join(
        f"{agent!r} ({missed} of {total} decisions)" for agent, (missed, total) in named.items()
    )
    why = (
        "each agent learns from its own return (reward_source='agent')"
        if own_return
        else "no paid decision follows them in their episode (e.g. approving the final answer)"
    )
    return (
        f"No reward can reach some decisions of {parts}: credit={rule!r} pays {pays}, and {why}. "
        f"Use credit='team', mark the agent graded, or pay it in the transition (docs/training.md, "
        f"'Which credit rule')."
    )


def summarize_episodes(episodes: Sequence[Episode], prefix: str) -> dict[str, Any]:
    """Accuracy overall (with its episode count and binomial standard error; a failed episode
    counts as wrong) and per graded agent, mean team return over the finished episodes (absent
    when none finished), the failures (:func:`~marft_algos.rollout.failures.failure_metrics`) and
    action length."""
    if not episodes:
        return {}
    n = len(episodes)
    accuracy = sum(episode_correct(e) for e in episodes) / n
    metrics: dict[str, Any] = {
        f"{prefix}/accuracy": accuracy,
        f"{prefix}/accuracy_se": standard_error(accuracy, n),
        f"{prefix}/episodes": n,
    }
    finished = finished_episodes(episodes)
    if finished:
        metrics[f"{prefix}/reward_mean"] = sum(e.team_return for e in finished) / len(finished)
    per_agent: dict[str, list[bool]] = {}
    for e in episodes:
        for agent, ok in e.info.get("graded", {}).items():
            per_agent.setdefault(agent, []).append(bool(ok))
    for agent, oks in sorted(per_agent.items()):
        metrics[f"{prefix}/accuracy/{agent}"] = sum(oks) / len(oks)
    metrics.update(_program_metrics(episodes, prefix))
    decisions = [d for e in episodes for d in e.decisions]
    if decisions:
        metrics[f"{prefix}/action_tokens_mean"] = sum(len(d.action_ids) for d in decisions) / len(
            decisions
        )
        metrics[f"{prefix}/action_cut_fraction"] = sum(not d.finished for d in decisions) / len(
            decisions
        )
    metrics.update(agent_metrics(episodes, prefix))
    metrics.update(_info_counters(episodes, prefix))
    return metrics


def agent_metrics(episodes: Sequence[Episode], prefix: str) -> dict[str, float]:
    """Per agent: reward received per finished episode, generated tokens per decision, share of
    its decisions cut at the token cap, and model calls (decisions) per episode."""
    n = len(episodes)
    if not n:
        return {}
    rows: dict[str, list[Any]] = {}
    for e in episodes:
        for d in e.decisions:
            rows.setdefault(d.agent, []).append(d)
    finished = finished_episodes(episodes)
    metrics: dict[str, float] = {}
    for agent, decisions in sorted(rows.items()):
        if finished:
            received = sum(e.agent_returns.get(agent, 0.0) for e in finished)
            metrics[f"{prefix}/reward_mean/{agent}"] = received / len(finished)
        metrics[f"{prefix}/action_tokens_mean/{agent}"] = sum(
            len(d.action_ids) for d in decisions
        ) / len(decisions)
        metrics[f"{prefix}/action_cut_fraction/{agent}"] = sum(
            not d.finished for d in decisions
        ) / len(decisions)
        metrics.setdefault(f"{prefix}/calls/{agent}", len(decisions) / n)
    return metrics


#: Final-info keys that have metrics of their own (not aggregated as counters).
_OWN_METRICS = frozenset(
    {"correct", "graded", "reward_parts", "calls", "program_error", "program_failure", "drop"}
)


def _info_counters(episodes: Sequence[Episode], prefix: str) -> dict[str, float]:
    """``<prefix>/info/<key>``: the mean of each numeric or boolean value of the episodes' final
    info, over the episodes that report it (e.g. a tool env's ``tool_calls``)."""
    values: dict[str, list[float]] = {}
    for e in episodes:
        for key, value in e.info.items():
            if key in _OWN_METRICS or not isinstance(value, int | float):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                continue
            values.setdefault(key, []).append(float(value))
    return {f"{prefix}/info/{k}": sum(v) / len(v) for k, v in sorted(values.items())}


def _program_metrics(episodes: Sequence[Episode], prefix: str) -> dict[str, Any]:
    """Named reward parts (mean per finished episode), model calls per agent and failures, for
    envs that report them (agent programs: ``info["reward_parts"]``, ``info["calls"]``)."""
    n = len(episodes)
    metrics: dict[str, Any] = {}
    finished = finished_episodes(episodes)
    parts = sorted({k for e in finished for k in e.info.get("reward_parts", {})})
    for part in parts:
        total = sum(e.info.get("reward_parts", {}).get(part, 0.0) for e in finished)
        metrics[f"{prefix}/reward/{part}"] = total / len(finished)
    agents = sorted({a for e in episodes for a in e.info.get("calls", {})})
    for agent in agents:
        calls = sum(e.info.get("calls", {}).get(agent, 0) for e in episodes)
        metrics[f"{prefix}/calls/{agent}"] = calls / n
    metrics.update(failure_metrics(episodes, prefix))
    return metrics


def greedy(settings: GenerationSettings) -> GenerationSettings:
    """The same settings with greedy decoding."""
    return dataclasses.replace(settings, top_p=1.0, top_k=0, do_sample=False)


class NoisyMessages:
    """A policy whose chosen agents' messages reach the env as seeded noise (an ablation).

    Wraps anything with the policy's ``generate(agent, messages_batch, settings, *, generator)``. For the agents
    in ``agents`` every generated message keeps its length, but each character is drawn from
    ``charset`` (by default digits, spaces, ``+ - =`` and newlines: text shaped like worked steps
    that carries nothing). The token ids and log-probs are left as generated: only what the env
    and the later agents read changes. Use it for evaluation, never for training. If a team's
    accuracy with an agent's messages replaced stays where it was, the others do not use them.

    Example::

        collector = RolloutCollector.from_factory(NoisyMessages(policy, ["reasoner"]), env_fn, 100, settings)

    Args:
        policy: The policy to wrap (e.g. a :class:`~marft_algos.policy.MultiAgentPolicy`).
        agents: The agents whose messages are replaced.
        seed: Seed of the noise.
        charset: Characters the noise is drawn from.

    Raises:
        ValueError: ``agents`` or ``charset`` is empty.
    """

    DEFAULT_CHARSET = "0123456789 +-=\n"

    def __init__(
        self, policy: Any, agents: Iterable[str], seed: int = 0, charset: str = DEFAULT_CHARSET
    ) -> None:
        self.policy = policy
        self.agents = frozenset(agents)
        if not self.agents:
            raise ValueError(
                "NoisyMessages needs at least one agent whose messages to replace, got none."
            )
        if not charset:
            raise ValueError("NoisyMessages needs a non-empty charset to draw the noise from.")
        self.charset = charset
        self.rng = random.Random(seed)

    def generate(
        self,
        agent: str,
        messages_batch: Sequence[Messages],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Any]:
        """The wrapped policy's generations, with noise for the text of the chosen agents."""
        out = list(self.policy.generate(agent, messages_batch, settings, generator=generator))
        if agent not in self.agents:
            return out
        return [
            g._replace(text="".join(self.rng.choice(self.charset) for _ in g.text)) for g in out
        ]

    def __getattr__(self, name: str) -> Any:
        # Everything but generate (agents' names, tokenizers, ...) is the wrapped policy's.
        return getattr(self.policy, name)
