"""Checkpoint folders of a run: their names (``checkpoint-N``), what makes one complete, and the
read lock that keeps a checkpoint being read from being pruned under its reader
(:func:`reading_checkpoint`; :meth:`~marft_algos.runs.folder.RunDirectory.prune` takes it
exclusively)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "CHECKPOINT_PREFIX",
    "READ_LOCK_SUFFIX",
    "checkpoint_number",
    "is_complete_checkpoint",
    "read_lock",
    "read_lock_path",
    "reading_checkpoint",
]

CHECKPOINT_PREFIX = "checkpoint-"
#: ``.checkpoint-N.read`` beside ``checkpoint-N``: readers hold a shared lock on it, pruning an
#: exclusive one, so a checkpoint being read is never deleted under its reader.
READ_LOCK_SUFFIX = ".read"


def checkpoint_number(path: Path) -> int | None:
    """N of a ``checkpoint-N`` folder, None for anything else."""
    suffix = path.name[len(CHECKPOINT_PREFIX) :]
    return int(suffix) if path.name.startswith(CHECKPOINT_PREFIX) and suffix.isdigit() else None


def is_complete_checkpoint(path: Path) -> bool:
    """A checkpoint folder with its manifest and state (what an atomic save always leaves)."""
    return (path / "manifest.json").is_file() and (path / "state.json").is_file()


def read_lock_path(checkpoint: Path) -> Path:
    """The read-lock file beside ``checkpoint`` (``.checkpoint-N.read``)."""
    return checkpoint.parent / f".{checkpoint.name}{READ_LOCK_SUFFIX}"


@contextlib.contextmanager
def read_lock(checkpoint: Path, exclusive: bool) -> Iterator[bool]:
    """Hold the checkpoint's read lock, shared (waiting for a prune to finish) or exclusive
    (without waiting). Yields False only when an exclusive lock is refused because someone reads;
    without flock (Windows) or a writable folder there is nothing to coordinate, and it yields
    True."""
    try:
        import fcntl
    except ImportError:
        yield True
        return
    try:
        handle = open(read_lock_path(checkpoint), "a")  # noqa: SIM115 (closed below)
    except OSError:
        yield True
        return
    with handle:
        mode = fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(handle.fileno(), mode)
        except OSError:
            yield False
            return
        yield True


@contextlib.contextmanager
def reading_checkpoint(checkpoint: str | os.PathLike[str]) -> Iterator[bool]:
    """Keep ``checkpoint`` from being pruned while this block reads it.

    A training run prunes old checkpoints as it goes; one being read is left in place until the
    next prune after the block ends. The checkpoint may have gone between finding it and pinning
    it, so the block gets whether it is still complete: when not, find the newest again.

    Yields:
        Whether the checkpoint is still there, complete, under the pin.
    """
    path = Path(checkpoint)
    with read_lock(path, exclusive=False):
        yield is_complete_checkpoint(path)
