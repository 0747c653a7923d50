"""Failed episodes in the metrics: which episodes failed, of what, and what their share is.

An env marks a failed episode in its final info (agent programs that raised, timed out, returned
no finite reward, passed a bound or used up ``max_calls``): ``program_error`` (type, message,
traceback) or ``program_failure`` (e.g. ``"max_calls"``). Such an episode's return is what the
env paid it (``error_reward``), not what the team earned, so reward means are taken over the
finished episodes only, and the failures are counted beside them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the collector names its failures with failed_at
    from marft_algos.rollout.collector import Episode

__all__ = ["failed_at", "failure_kind", "failure_metrics", "finished_episodes"]


def failed_at(error: Mapping[str, Any]) -> str:
    """Where a program failed, from its ``info["program_error"]``: ``at agent 'planner' call 2``
    (the last call it made), or ``before its first model call``."""
    agent, call = error.get("agent"), error.get("call")
    if agent is None and call is None:
        return "before its first model call"
    return f"at agent {agent!r} call {call}"


def failure_kind(episode: Episode) -> str | None:
    """What ended a failed episode (``"Timeout"``, ``"ValueError"``, ``"max_calls"``, ...);
    None for an episode that finished."""
    error = episode.info.get("program_error")
    if isinstance(error, dict):
        return str(error.get("type") or "error")
    failure = episode.info.get("program_failure")
    return str(failure) if failure else None


def finished_episodes(episodes: Sequence[Episode]) -> list[Episode]:
    """The episodes that did not fail: those whose returns the team earned."""
    return [e for e in episodes if failure_kind(e) is None]


def failure_metrics(episodes: Sequence[Episode], prefix: str) -> dict[str, Any]:
    """``<prefix>/episodes_failed`` (the share of the episodes that failed),
    ``<prefix>/program_errors`` (how many) and ``<prefix>/program_errors/<kind>`` (how many of
    each kind), for envs that report failures (agent programs: their final info has ``calls``)."""
    kinds = Counter(k for k in map(failure_kind, episodes) if k is not None)
    if not episodes or not (kinds or any("calls" in e.info for e in episodes)):
        return {}
    failed = sum(kinds.values())
    metrics: dict[str, Any] = {
        f"{prefix}/episodes_failed": failed / len(episodes),
        f"{prefix}/program_errors": failed,
    }
    for kind, count in sorted(kinds.items()):
        metrics[f"{prefix}/program_errors/{kind}"] = count
    return metrics
