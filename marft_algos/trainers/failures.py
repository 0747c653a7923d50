"""Episodes that failed (an agent program raised, timed out, passed a bound, used up its calls):
counted, written out, told on the console, and left out of the update when the env asks.

An env marks such an episode in its final info: ``program_error`` (type, message, traceback) or
``program_failure`` (e.g. ``"max_calls"``), and ``drop=True`` when failed episodes must not be
trained on (agent programs' default ``on_error="drop"``: a failure paid a fixed reward could
outscore finishing, and the trainer would learn to fail).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marft_algos.distributed import DistributedContext
from marft_algos.rollout.collector import Episode
from marft_algos.runs.samples import episode_transcript

__all__ = ["FAILURES_FILE", "failure_kind", "set_aside_failures"]

logger = logging.getLogger("marft_algos.trainers.base")

#: Transcripts of the failed rollout episodes, in the run folder.
FAILURES_FILE = "program_errors.jsonl"


def failure_kind(episode: Episode) -> str | None:
    """What ended a failed episode (``"Timeout"``, ``"ValueError"``, ``"max_calls"``, ...);
    None for an episode that finished."""
    error = episode.info.get("program_error")
    if isinstance(error, dict):
        return str(error.get("type") or "error")
    failure = episode.info.get("program_failure")
    return str(failure) if failure else None


def set_aside_failures(
    episodes: Sequence[Episode],
    iteration: int,
    folder: str | Path | None,
    dist: DistributedContext,
) -> tuple[list[Episode], dict[str, Any]]:
    """The episodes to train on, and ``rollout/episodes_dropped``.

    Each failed episode's transcript (its error and traceback included) is appended to
    ``program_errors.jsonl`` in ``folder``, and one console line per iteration says how many
    failed, of which kind, and where they are.
    """
    failed = [(i, e) for i, e in enumerate(episodes) if failure_kind(e) is not None]
    dropped = sum(bool(e.info.get("drop")) for _, e in failed)
    metrics = {"rollout/episodes_dropped": int(dist.sum([dropped])[0])}
    if not failed:
        return list(episodes), metrics
    where = "not kept (no output_dir)"
    if folder is not None:
        path = Path(folder) / FAILURES_FILE
        with path.open("a", encoding="utf-8") as f:
            for i, e in failed:
                row = {"iteration": iteration, "rank": dist.rank}
                row.update(episode_transcript(e, i))
                f.write(json.dumps(row, default=str) + "\n")
        where = str(path)
    kinds = Counter(failure_kind(e) for _, e in failed)
    logger.warning(
        "Iteration %d: %d of %d episodes failed (%s); %s. Transcripts: %s",
        iteration + 1,
        len(failed),
        len(episodes),
        ", ".join(f"{kind} {n}" for kind, n in kinds.most_common()),
        f"{dropped} left out of the update (on_error='drop')"
        if dropped
        else "trained on with error_reward (on_error='reward')",
        where,
    )
    return [e for e in episodes if not e.info.get("drop")], metrics
