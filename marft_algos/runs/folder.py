"""A run folder that survives kills and refuses to be shared: lock, checkpoints, atomic files.

A run directory holds ``config.json`` (what the run is), ``metrics.jsonl`` (one record per
iteration) and ``checkpoint-N`` folders. :class:`RunDirectory` is the one place that knows that
layout:

- :meth:`RunDirectory.acquire` takes an exclusive ``flock`` on ``.lock`` for the life of the
  process, so a second run pointed at a folder in use is refused (the kernel drops the lock when
  the process dies, even under ``kill -9``, so a killed run never leaves a stale lock);
- stale ``.checkpoint-N.tmp-*`` / ``.old-*`` folders of interrupted checkpoint writes are removed;
- :meth:`RunDirectory.latest_checkpoint` finds the newest *complete* checkpoint;
- :meth:`RunDirectory.prune` keeps the newest ``K`` checkpoints, deleting older ones by first
  renaming them out of the ``checkpoint-N`` namespace (a kill mid-delete leaves no half folder
  under a checkpoint name); a checkpoint that ``marft eval`` or ``marft export`` is reading
  (:func:`reading_checkpoint`: a shared ``flock`` on ``.checkpoint-N.read``) is left for the next
  prune, so a run can be evaluated while it trains;
- :func:`write_atomic` replaces a file in one ``os.replace``;
- a write that runs out of space (a full disk, a quota, a file-size limit) raises
  :class:`DiskFullError`: one line naming the folder and the fix, with the folder left resumable.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from marft_algos.common.files import file_sha256
from marft_algos.runs.checkpoint_folders import (
    CHECKPOINT_PREFIX,
    READ_LOCK_SUFFIX,
    checkpoint_number,
    is_complete_checkpoint,
    read_lock,
    read_lock_path,
    reading_checkpoint,
)

__all__ = [
    "RESUMABLE_CHANGES",
    "ConfigMismatchError",
    "DiskFullError",
    "RunDirectory",
    "RunDirectoryError",
    "RunExistsError",
    "RunInUseError",
    "TrainingDiverged",
    "disk_full_error",
    "file_sha256",
    "reading_checkpoint",
    "write_atomic",
]

#: Resolved path -> (open lock file, holder count): a process may build several trainers on one
#: folder (resume after an early stop); other processes are refused.
_HELD: dict[str, tuple[Any, int]] = {}


class RunDirectoryError(RuntimeError):
    """The output directory cannot be used as asked (says why and what to do)."""


class RunInUseError(RunDirectoryError):
    """Another process is writing to this run directory."""


class RunExistsError(RunDirectoryError):
    """The directory holds an earlier run and neither resume nor overwrite was asked for."""


class DiskFullError(RunDirectoryError):
    """A run file could not be written for lack of space; the folder is left as it was."""


_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
# How libraries that do not raise OSError report it: safetensors ("StorageFull", "os error 28"),
# torch.save ("file write failed"; "unexpected pos" when its zip writer's write came up short, as
# a full disk makes it: "[enforce fail at inline_container.cc:672] . unexpected pos 128 vs 74").
_DISK_FULL_TEXT = (
    "no space left",
    "file too large",
    "quota exceeded",
    "storagefull",
    "filetoolarge",
    "os error 28",
    "os error 27",
    "file write failed",
    "unexpected pos",
)


def disk_full_error(exc: BaseException, path: str | os.PathLike[str]) -> DiskFullError | None:
    """A :class:`DiskFullError` for ``path`` when ``exc`` (or its cause) is a lack of space, else None."""
    seen: BaseException | None = exc
    for _ in range(8):  # the exception, its cause, its cause's cause...
        if seen is None:
            return None
        full = isinstance(seen, OSError) and seen.errno in _DISK_FULL_ERRNOS
        if full or any(text in str(seen).lower() for text in _DISK_FULL_TEXT):
            return DiskFullError(
                f"no space left at {os.fspath(path)!r}: free space there (or raise the file-size "
                f"limit, ulimit -f), or move the run folder to a larger disk, then continue with "
                f"--resume (the folder holds every checkpoint written before this)."
            )
        seen = seen.__cause__ or seen.__context__
    return None


class TrainingDiverged(RuntimeError):
    """Every policy update was skipped as non-finite for too many iterations in a row."""


class ConfigMismatchError(ValueError):
    """A resume would continue the run with settings that differ from the checkpoint's."""


#: Config fields a resume may change without changing what the run computes.
RESUMABLE_CHANGES = frozenset(
    {
        "iterations",
        "output_dir",
        "checkpoint_every",
        "keep_checkpoints",
        "tensorboard",
        "overwrite",
        "max_nonfinite_iterations",
        "sync_check_every",
        "eval_samples",
        # Where the base's weights live (sharded or whole), not what the run computes.
        "fsdp",
        "fsdp_replicas",
        # Where the episodes' spans go (marft_algos.runs.trace_settings.TRACE_FIELDS).
        "trace_otlp",
        "trace_file",
        "trace_content",
    }
)


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary sibling and one rename (never half a file)."""
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        full = disk_full_error(exc, target.parent)
        if full is None:
            raise
        raise full from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a run's files are ordinary files
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        full = disk_full_error(exc, target.parent)
        if full is not None:
            raise full from exc
        raise


class RunDirectory:
    """The files of one training run.

    Args:
        path: The run directory (created on :meth:`acquire`).

    Raises:
        RunDirectoryError: ``path`` exists and is not a directory.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryError(
                f"Output directory {str(self.path)!r} exists and is a file, not a directory; "
                f"choose another --output-dir (or move the file away)."
            )

    # ------------------------------------------------------------------ lock
    def acquire(self) -> None:
        """Lock the folder for this process (re-entrant inside a process) and clean stale temp folders.

        Raises:
            RunInUseError: Another process holds the lock.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        key = str(self.path.resolve())
        held = _HELD.get(key)
        if held is not None:
            _HELD[key] = (held[0], held[1] + 1)
            return
        handle = open(self.path / ".lock", "a+")  # noqa: SIM115 (held open for the process's life)
        try:
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no flock (Windows): fall back to no locking rather than no training
            pass
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise RunInUseError(
                f"Run directory {str(self.path)!r} is in use by {owner}; two runs writing one folder "
                f"would interleave and erase each other's metrics and checkpoints. Wait for it to "
                f"finish, stop it, or choose another --output-dir."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()}\n")
        handle.flush()
        _HELD[key] = (handle, 1)
        self.clean_stale()

    def release(self) -> None:
        """Drop this holder's share of the lock (the lock goes when the last holder releases)."""
        key = str(self.path.resolve())
        held = _HELD.get(key)
        if held is None:
            return
        if held[1] > 1:
            _HELD[key] = (held[0], held[1] - 1)
            return
        del _HELD[key]
        held[0].close()

    def discard_if_empty(self) -> None:
        """Release the lock and remove the folder if it holds nothing but the lock file."""
        self.release()
        if self.path.is_dir() and {p.name for p in self.path.iterdir()} <= {".lock"}:
            (self.path / ".lock").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.path.rmdir()

    def clean_stale(self) -> list[str]:
        """Remove temporary folders left by interrupted checkpoint writes and deletions."""
        removed = []
        for path in self.path.glob(f".{CHECKPOINT_PREFIX}*"):
            if path.is_dir() and (".tmp-" in path.name or ".old-" in path.name):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
        for path in self.path.glob(f".{CHECKPOINT_PREFIX}*{READ_LOCK_SUFFIX}"):
            checkpoint = path.with_name(path.name[1 : -len(READ_LOCK_SUFFIX)])
            if path.is_file() and not checkpoint.exists():  # a reader's, after the prune
                path.unlink(missing_ok=True)
                removed.append(path.name)
        for name in ("config.json", "metrics.jsonl"):  # write_atomic's temporary files
            for path in self.path.glob(f".{name}.*.tmp"):
                path.unlink(missing_ok=True)
                removed.append(path.name)
        return removed

    # ------------------------------------------------------------------ contents
    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def read_config(self) -> dict[str, Any] | None:
        """The saved ``config.json``, or None when there is none."""
        if not self.config_path.is_file():
            return None
        try:
            config = json.loads(self.config_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RunDirectoryError(
                f"{str(self.config_path)!r} is not valid JSON ({err}); restore it from a backup, "
                f"or start the run again with --overwrite."
            ) from None
        if not isinstance(config, dict):
            raise RunDirectoryError(
                f"{str(self.config_path)!r} is not a JSON object; restore it from a backup, or "
                f"start the run again with --overwrite."
            )
        return config

    def numbered_checkpoints(self) -> list[Path]:
        """Every ``checkpoint-N`` folder, complete or not, oldest first."""
        if not self.path.is_dir():
            return []
        found = [p for p in self.path.iterdir() if p.is_dir() and checkpoint_number(p) is not None]
        return sorted(found, key=lambda p: checkpoint_number(p) or 0)

    def checkpoints(self) -> list[Path]:
        """Complete ``checkpoint-N`` folders, oldest first."""
        return [p for p in self.numbered_checkpoints() if is_complete_checkpoint(p)]

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    def has_run(self) -> bool:
        """Whether an earlier run left anything here (config, metrics or checkpoints)."""
        return (
            self.config_path.is_file()
            or (self.metrics_path.is_file() and self.metrics_path.stat().st_size > 0)
            or bool(self.checkpoints())
        )

    def describe(self) -> str:
        """One phrase saying what the earlier run here reached (for error messages)."""
        config = self.read_config() or {}
        latest = self.latest_checkpoint()
        done = checkpoint_number(latest) if latest is not None else 0
        planned = config.get("iterations")
        if planned is not None and done is not None and done >= planned:
            return f"a finished run ({done} of {planned} iterations)"
        if planned is not None:
            return f"an unfinished run (checkpoint at iteration {done} of {planned})"
        return "files of an earlier run"

    def clear(self) -> None:
        """Delete the earlier run's config, metrics, per-episode held-out outcomes, attribution,
        checkpoints, plot and TensorBoard logs."""
        for path in self.checkpoints():
            self._delete(path)
        names = ("eval_outcomes.jsonl", "attribution.json", "learning_curve.png")
        for name in ("config.json", "metrics.jsonl", *names):
            (self.path / name).unlink(missing_ok=True)
        shutil.rmtree(self.path / "tensorboard", ignore_errors=True)

    def prune(self, keep: int) -> list[Path]:
        """Delete all but the newest ``keep`` checkpoints (``keep`` < 1 keeps all).

        A checkpoint another process is reading (:func:`reading_checkpoint`) is kept for now; a
        later prune deletes it.

        Returns:
            The checkpoints deleted.
        """
        if keep < 1:
            return []
        deleted = []
        for path in self.checkpoints()[:-keep]:
            with read_lock(path, exclusive=True) as free:
                if not free:
                    continue  # being read: the next prune deletes it
                self._delete(path)
                read_lock_path(path).unlink(missing_ok=True)
            deleted.append(path)
        return deleted

    def _delete(self, path: Path) -> None:
        # Rename first: a kill during rmtree leaves a '.old-' folder that clean_stale removes, never
        # a half-deleted folder that still looks like a checkpoint.
        aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        aside.rmdir()
        os.replace(path, aside)
        if aside.is_symlink():  # a checkpoint linked in from elsewhere: only the link is the run's
            aside.unlink()
        else:
            shutil.rmtree(aside, ignore_errors=True)
