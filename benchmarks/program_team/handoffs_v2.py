"""Hand-off statistics of ``support-desk-v2`` episodes, read from a run folder's transcripts
(``samples.jsonl``): what the team did, not only whether it succeeded.

:func:`handoff_stats` of one evaluation's episodes gives success, the router's parsed and right
hand-offs, the route share per department (read from the first call's reply, so the single-agent
desk's routes count too), the reviewer's verdicts, approvals, false approvals and false
rejections, and the calls per episode and per agent.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import team_v2

from marft_algos.runs.samples import read_samples

__all__ = ["PARTS", "handoff_stats", "samples_by_iteration"]

#: The reward parts every statistic averages (``team_v2.WEIGHTS``' parts and the success).
PARTS = ("success", *team_v2.WEIGHTS)


def samples_by_iteration(folder: str | Path) -> dict[int, list[dict[str, Any]]]:
    """A run folder's evaluation transcripts by iteration (empty when none were written)."""
    by_iteration: dict[int, list[dict[str, Any]]] = {}
    for episode in read_samples(folder):
        by_iteration.setdefault(int(episode["iteration"]), []).append(episode)
    return by_iteration


def first_route(episode: dict[str, Any]) -> str:
    """The department the episode's first reply handed the ticket to, or ``"None"``."""
    turns = episode.get("turns") or []
    if not turns:
        return "None"
    return team_v2.parse_route(str(turns[0].get("action", ""))) or "None"


def handoff_stats(episodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The means of the reward parts over ``episodes`` (transcript rows), the route share per
    department, and the calls per episode and per agent; None for no episodes."""
    n = len(episodes)
    if not n:
        return None
    parts = [e["info"].get("reward_parts", {}) for e in episodes]
    out: dict[str, Any] = {"episodes": n}
    out.update({p: sum(r.get(p, 0.0) for r in parts) / n for p in PARTS})
    routes = Counter(first_route(e) for e in episodes)
    out["route_share"] = {k: v / n for k, v in sorted(routes.items())}
    calls: Counter[str] = Counter()
    for e in episodes:
        calls.update(e["info"].get("calls", {}))
    out["calls"] = sum(calls.values()) / n
    out["calls_per_agent"] = {k: v / n for k, v in sorted(calls.items())}
    return out
