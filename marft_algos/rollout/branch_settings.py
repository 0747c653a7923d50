"""The ``branch`` setting: which agents' turns a team's episode branches at, how wide and how
deep (:mod:`marft_algos.rollout.branching` grows the trees), and its command-line form."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["BranchLevel", "branch_levels", "episodes_per_tree", "parse_branch"]


@dataclass(frozen=True)
class BranchLevel:
    """One branched agent: ``width`` alternatives, each continued ``rollouts`` times."""

    agent: str
    width: int
    rollouts: int


def branch_levels(branch: Mapping[str, Any] | None) -> tuple[BranchLevel, ...]:
    """The validated levels of a ``branch`` setting (empty for None).

    Raises:
        ValueError: Not ``{agent: {"width": W >= 2, "rollouts": M >= 1}}``; the message names the
            bad entry and shows the form.
    """
    if branch is None:
        return ()
    example = '{"router": {"width": 3, "rollouts": 4}} (CLI: --branch router=3x4)'
    if not isinstance(branch, Mapping) or not branch:
        raise ValueError(
            f"branch must map agents to their width and rollouts, e.g. {example}; got {branch!r}."
        )
    levels = []
    for agent, spec in branch.items():
        if (
            not isinstance(agent, str)
            or not isinstance(spec, Mapping)
            or set(spec) != {"width", "rollouts"}
        ):
            raise ValueError(
                f"branch[{agent!r}] must be {{'width': W, 'rollouts': M}}, got {spec!r}; e.g. {example}."
            )
        width, rollouts = spec["width"], spec["rollouts"]
        for name, value, least in (("width", width, 2), ("rollouts", rollouts, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                why = (
                    "alternatives to compare"
                    if name == "width"
                    else "continuations per alternative"
                )
                raise ValueError(
                    f"branch[{agent!r}]['{name}'] must be a whole number >= {least} ({why}), got "
                    f"{value!r}; e.g. {example}."
                )
        levels.append(BranchLevel(agent, width, rollouts))
    return tuple(levels)


def episodes_per_tree(levels: Sequence[BranchLevel]) -> int:
    """Episodes one tree holds when every continuation reaches every branch point."""
    return math.prod(level.width * level.rollouts for level in levels)


_SHORT = re.compile(r"^\s*([^\s=,]+)\s*=\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


def parse_branch(text: str) -> dict[str, dict[str, int]] | None:
    """A ``branch`` setting from the command line: ``router=3x4`` or ``router=3x4,reviewer=2x2``
    (agent = width x rollouts), or the JSON mapping; ``none`` for None.

    Raises:
        ValueError: Neither form; the message shows both.
    """
    text = text.strip()
    if text.lower() in ("", "none", "null"):
        return None
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"--branch {text!r} is not valid JSON ({exc.msg}); e.g. router=3x4."
            ) from None
        branch_levels(value)
        return dict(value)
    out: dict[str, dict[str, int]] = {}
    for part in text.split(","):
        match = _SHORT.match(part)
        if match is None:
            raise ValueError(
                f"--branch {text!r}: {part.strip()!r} is not AGENT=WIDTHxROLLOUTS; write e.g. "
                f"router=3x4 or router=3x4,reviewer=2x2 (or the JSON mapping)."
            )
        out[match[1]] = {"width": int(match[2]), "rollouts": int(match[3])}
    branch_levels(out)
    return out
