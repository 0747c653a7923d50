"""``marft eval --attribution``: the table of every agent alone reverted and alone tuned, and the
file it is saved to (the settings and their rows are :mod:`marft_algos.rollout.attribution`'s)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ATTRIBUTION_FILE", "attribution_table", "print_attribution", "save_attribution"]


#: File the attribution is saved to, in the run folder.
ATTRIBUTION_FILE = "attribution.json"


def save_attribution(checkpoint: Path, metrics: Mapping[str, Any]) -> Path:
    """Write the attribution of ``metrics`` (with the checkpoint's name) to the run folder's
    :data:`ATTRIBUTION_FILE`; returns its path."""
    saved = checkpoint.parent / ATTRIBUTION_FILE
    record = {"checkpoint": checkpoint.name, **metrics["attribution"]}
    saved.write_text(json.dumps(record, indent=2) + "\n")
    return saved


def print_attribution(console: Any, metrics: Mapping[str, Any], saved: Path) -> None:
    """Each decoding's attribution table, where it was saved and how to read it."""
    for decoding, rows in (metrics.get("attribution") or {}).items():
        if decoding in ("greedy", "sampled"):
            console.print(attribution_table(rows, decoding))
    console.print(
        f"attribution saved to {saved}. Reading it: an agent whose reversion costs nothing did "
        f"not contribute; one whose reversion helps (a positive difference) regressed."
    )


def attribution_table(rows: Sequence[Mapping[str, Any]], decoding: str) -> Any:
    """The settings as a rich table: accuracy and reward, each with its paired difference to
    all tuned."""
    from rich.table import Table

    n = rows[0]["episodes"] if rows else 0
    table = Table(
        title=f"attribution ({decoding}, {n} held-out episodes): each setting against all tuned "
        f"on the same episodes, ± paired standard error"
    )
    table.add_column("setting")
    table.add_column("accuracy", justify="right")
    table.add_column("Δ points", justify="right")
    table.add_column("→right/→wrong (p)", justify="right")
    table.add_column("reward (Δ)", justify="right")
    failures = any(r.get("episodes_failed") for r in rows)
    if failures:  # agent programs: rewards are over the finished episodes
        table.add_column("failed", justify="right")
    for r in rows:
        first = not r["untuned"]
        cells = [
            r["setting"].replace(" = ", "\n= "),
            f"{r['accuracy']:.3f} ± {r['accuracy_se']:.3f}",
            ""
            if first
            else f"{100 * r['accuracy_difference']:+.1f} ± {100 * r['accuracy_difference_se']:.1f}",
            "" if first else f"{r['wrong_to_right']}/{r['right_to_wrong']} (p={r['p_value']:.2g})",
            _reward_cell(r, first),
        ]
        if failures:
            cells.append(f"{r.get('episodes_failed', 0)} of {r['episodes']}")
        table.add_row(*cells)
    return table


def _reward_cell(row: Mapping[str, Any], first: bool) -> str:
    """The mean reward of the finished episodes and, against all tuned, its paired difference."""
    if row.get("reward_mean") is None:
        return "no episode finished"
    cell = f"{row['reward_mean']:.3f}"
    if not first and row.get("reward_difference") is not None:
        cell += f" ({row['reward_difference']:+.3f} ± {row['reward_difference_se']:.3f})"
    return cell
