"""Episodes that failed (an agent program raised, timed out, passed a bound, used up its calls):
counted, written out, told on the console, and left out of the update when the env asks. Failed
held-out episodes get the same console line and transcripts (:func:`report_failures`).

An env marks such an episode in its final info: ``program_error`` (type, message, traceback) or
``program_failure`` (e.g. ``"max_calls"``), and ``drop=True`` when failed episodes must not be
trained on (agent programs' default ``on_error="drop"``: a failure paid a fixed reward could
outscore finishing, and the trainer would learn to fail).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marft_algos.distributed import DistributedContext
from marft_algos.rollout.collector import Episode
from marft_algos.rollout.failures import failure_kind
from marft_algos.runs.samples import episode_transcript

__all__ = ["FAILURES_FILE", "failure_kind", "report_failures", "set_aside_failures"]

logger = logging.getLogger("marft_algos.trainers.base")

#: Transcripts of the failed rollout and held-out episodes, in the run folder.
FAILURES_FILE = "program_errors.jsonl"


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
    failed = [e for e in episodes if failure_kind(e) is not None]
    dropped = sum(bool(e.info.get("drop")) for e in failed)
    metrics = {"rollout/episodes_dropped": int(dist.sum([dropped])[0])}
    what = (
        f"{dropped} left out of the update (on_error='drop')"
        if dropped
        else "trained on with error_reward (on_error='reward')"
    )
    report_failures(episodes, f"Iteration {iteration + 1}", what, folder, dist, iteration)
    return [e for e in episodes if not e.info.get("drop")], metrics


def report_failures(
    episodes: Sequence[Episode],
    when: str,
    what: str,
    folder: str | Path | None,
    dist: DistributedContext,
    iteration: int,
    split: str = "rollout",
    fields: Mapping[str, Any] | None = None,
) -> int:
    """Tell the failed episodes in one console line (``<when>: 5 of 64 episodes failed (Timeout 3,
    ValueError 2); <what>. Transcripts: <file>``) and append their transcripts to
    ``program_errors.jsonl`` in ``folder`` (rows marked with ``split`` and ``fields``, e.g. the
    command that ran them); returns how many failed."""
    failed = [(i, e) for i, e in enumerate(episodes) if failure_kind(e) is not None]
    if not failed:
        return 0
    where = "not kept (no output_dir)"
    if folder is not None:
        path = Path(folder) / FAILURES_FILE
        with path.open("a", encoding="utf-8") as f:
            for i, e in failed:
                row = {"iteration": iteration, "split": split, "rank": dist.rank, **(fields or {})}
                row.update(episode_transcript(e, i))
                f.write(json.dumps(row, default=str) + "\n")
        where = str(path)
    kinds = Counter(failure_kind(e) for _, e in failed)
    logger.warning(
        "%s: %d of %d episodes failed (%s); %s. Transcripts: %s",
        when,
        len(failed),
        len(episodes),
        ", ".join(f"{kind} {n}" for kind, n in kinds.most_common()),
        what,
        where,
    )
    return len(failed)
