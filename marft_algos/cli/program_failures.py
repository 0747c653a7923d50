"""Agent programs that failed a run: one error line, with their transcripts saved next to it.

The collector stops a rollout when more than ``max_error_share`` of its episodes ended with a
program error (:class:`~marft_algos.rollout.collector.ProgramFailures`, whose message carries the
first failure's traceback). On the command line that is input the user fixes (the program), so it
ends like every such error: one line naming the failure, its agent and call, and the file that
holds the failed episodes' transcripts (the run folder's ``program_errors.jsonl``, where the trainer
keeps every failed rollout episode), exit status 2; ``MARFT_DEBUG=1`` shows the traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from marft_algos.cli.parsing import UsageError
from marft_algos.rollout.collector import ProgramFailures
from marft_algos.rollout.failures import failed_at
from marft_algos.runs.samples import episode_transcript
from marft_algos.trainers.failures import FAILURES_FILE

__all__ = ["ProgramFailed", "describe", "reporting_program_failures"]


class ProgramFailed(UsageError):
    """Too many episodes' agent programs failed (the message is one line; the cause holds the
    collector's error with the first traceback)."""


def _one_line(text: object, width: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 3] + "..."


def _write_transcripts(error: ProgramFailures, folder: Path) -> Path | None:
    if not error.failed:
        return None
    path = folder / FAILURES_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            for index, episode in enumerate(error.failed):
                row = {"stopped_the_run": True, **episode_transcript(episode, index)}
                fh.write(json.dumps(row, default=str) + "\n")
    except OSError:
        return None
    return path


def describe(error: ProgramFailures, transcripts: Path | None) -> str:
    """One line: how many episodes failed, the first failure's type, message, agent and call, and
    where the transcripts are."""
    first = error.failed[0].info.get("program_error", {}) if error.failed else {}
    where = (
        f"transcripts of the failed episodes: {transcripts}"
        if transcripts is not None
        else "no transcripts were saved"
    )
    if not first:
        return f"{_one_line(str(error).splitlines()[0])} ({where})"
    return (
        f"{len(error.failed)} of {error.episodes} episodes' agent programs failed (more than "
        f"max_error_share={error.limit:g}); the first, {failed_at(first)}: {first.get('type')}: "
        f"{_one_line(first.get('message'))} ({where})"
    )


@contextmanager
def reporting_program_failures(folder: str | Path, *, write: bool = True) -> Iterator[None]:
    """Turn :class:`ProgramFailures` raised in the block into :class:`ProgramFailed` (one line),
    after appending the failed episodes' transcripts to ``folder``/``program_errors.jsonl``
    (marked ``"stopped_the_run": true``; ``write=False``: another process writes them)."""
    try:
        yield
    except ProgramFailures as exc:
        path = _write_transcripts(exc, Path(folder)) if write else Path(folder) / FAILURES_FILE
        raise ProgramFailed(describe(exc, path)) from exc
