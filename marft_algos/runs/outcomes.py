"""Per-episode outcomes of every held-out evaluation, kept so that two evaluations of a run can be
compared episode by episode (:mod:`marft_algos.rollout.paired`).

At each evaluation the trainer appends one JSON object to ``eval_outcomes.jsonl`` in the run
folder::

    {"iteration": 10, "prefix": "eval",
     "episodes": [{"seed": 0, "options": {"index": 0}, "correct": true, "team_return": 1.0}, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marft_algos.rollout.paired import PairedComparison, paired_outcomes

__all__ = ["OUTCOMES_FILE", "paired_before_after", "read_outcomes", "write_outcomes"]

#: File name of the per-episode outcomes in a run folder.
OUTCOMES_FILE = "eval_outcomes.jsonl"


def write_outcomes(
    folder: str | Path, iteration: int, prefix: str, episodes: Sequence[Mapping[str, Any]]
) -> None:
    """Append one evaluation's per-episode outcomes
    (:func:`~marft_algos.rollout.evaluation.episode_outcomes`)."""
    row = {"iteration": iteration, "prefix": prefix, "episodes": list(episodes)}
    with (Path(folder) / OUTCOMES_FILE).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=repr) + "\n")


def read_outcomes(folder: str | Path) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """``(iteration, prefix) -> episodes``; a later line replaces an earlier one of the same
    evaluation (a resumed run redoes it) and a line torn by a kill is skipped."""
    path = Path(folder) / OUTCOMES_FILE
    out: dict[tuple[int, str], list[dict[str, Any]]] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            out[int(row["iteration"]), str(row["prefix"])] = list(row["episodes"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return out


def paired_before_after(
    folder: str | Path, first: int, last: int, prefix: str = "eval"
) -> PairedComparison | None:
    """The paired comparison of the evaluations at iterations ``first`` and ``last`` of a run
    folder, or None when either was not recorded or they share no episode."""
    outcomes = read_outcomes(folder)
    before, after = outcomes.get((first, prefix)), outcomes.get((last, prefix))
    if not before or not after:
        return None
    return paired_outcomes(before, after)
