"""Rendering an episode transcript with rich (``"human"``) or as plain text (``"ansi"``)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

if TYPE_CHECKING:
    from marft_envs.core.dependency import Turn
    from marft_envs.core.env import FlexPOMDPEnv

__all__ = ["render_transcript"]


def _panels(env: FlexPOMDPEnv) -> list[Panel]:
    panels = []
    rounds: list[tuple[int, list[Turn], list[tuple[str, str]], dict[str, float] | None]] = [
        (r.timestep, r.turns, r.actions, r.rewards) for r in env.history
    ]
    live = env.round_state
    # After the last round ends its record is in the history while the agents still have to step
    # None; the round state then is that finished round, not one in progress.
    finished = bool(env.history) and env.history[-1].timestep == live.timestep
    if env.agents and not finished:
        rounds.append((live.timestep, live.turns, live.actions, None))
    for timestep, turns, actions, rewards in rounds:
        body = []
        for turn, (agent, action) in zip(turns, actions, strict=False):
            seen = ", ".join(turn.sees) if turn.sees else "nothing"
            body.append(Text(f"{agent} (sees {seen})", style="bold cyan"))
            body.append(Text(action if action else "<empty>"))
        if rewards is not None:
            body.append(
                Text(
                    "rewards: " + ", ".join(f"{a}={r:g}" for a, r in rewards.items()), style="green"
                )
            )
        panels.append(Panel(Group(*body), title=f"round {timestep}", title_align="left"))
    return panels


def render_transcript(env: FlexPOMDPEnv, mode: str) -> str | None:
    """Render the episode so far; returns the text for ``"ansi"``, prints for ``"human"``."""
    if mode == "human":
        console = Console()
        for panel in _panels(env):
            console.print(panel)
        return None
    console = Console(record=True, width=100, file=io.StringIO())
    for panel in _panels(env):
        console.print(panel)
    return console.export_text()
