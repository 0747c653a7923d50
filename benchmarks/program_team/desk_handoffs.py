"""The hand-off statistics of one evaluation of a support desk (v0, v1, v2), read off its
transcripts (``samples.jsonl`` rows): what the team did, not only whether it succeeded.
``summarize.py`` lists them in its docstring; ``run_v2.py`` records them in every job's row.
"""

from __future__ import annotations

from typing import Any

from team import parse_route

__all__ = ["DEPARTMENTS", "first_route", "handoffs"]

DEPARTMENTS = ("billing", "shipping", "accounts")


def handoffs(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """Hand-off, routing, reviewer and call statistics of one evaluation's transcripts."""
    parts = [e["info"].get("reward_parts", {}) for e in episodes]
    reviewed = [
        p for e, p in zip(episodes, parts, strict=True) if e["info"]["calls"].get("reviewer")
    ]
    right = [p for p in parts if p.get("routed")]
    n = len(episodes)
    return {
        "episodes": n,
        "success": sum(p.get("success", 0.0) for p in parts) / n,
        "parse_failure": 1 - sum(p.get("parsed", 0.0) for p in parts) / n,
        "routed": sum(p.get("routed", 0.0) for p in parts) / n,
        # The specialists' and reviewer's part: success where the route was right.
        "success_given_right_route": (
            sum(p.get("success", 0.0) for p in right) / len(right) if right else None
        ),
        "reviewed": len(reviewed),
        "false_approval": (
            sum(p.get("false_approval", 0.0) for p in reviewed) / len(reviewed)
            if reviewed
            else None
        ),
        "false_rejection": (
            sum(p.get("false_rejection", 0.0) for p in reviewed) / len(reviewed)
            if reviewed
            else None
        ),
        "calls": sum(sum(e["info"]["calls"].values()) for e in episodes) / n,
        "calls_per_agent": {
            agent: sum(e["info"]["calls"].get(agent, 0) for e in episodes) / n
            for agent in sorted({a for e in episodes for a in e["info"]["calls"]})
        },
        # Where the first reply sent the requests (None: the hand-off failed).
        "routes": {
            str(department): sum(first_route(e) == department for e in episodes) / n
            for department in (*DEPARTMENTS, None)
        },
    }


def first_route(episode: dict[str, Any]) -> str | None:
    """The department an episode's first reply handed the request to, or None."""
    turns = episode.get("turns") or []
    return parse_route(str(turns[0].get("action", ""))) if turns else None
