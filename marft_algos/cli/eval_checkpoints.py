"""Where ``marft eval`` (and ``marft serve``, ``marft export``) finds a run's checkpoint, and the
device and dtype it evaluates the run with.

A run folder's newest checkpoint that verifies is taken, refused when another run wrote it (copied
in), and pinned against pruning while it is read; the device and dtype are the run's unless given.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from marft_algos.cli.parsing import UsageError

__all__ = ["find_checkpoint", "open_checkpoint", "run_device_and_dtype"]

logger = logging.getLogger("marft_algos.cli.evaluate")


def find_checkpoint(path: str | Path) -> Path:
    """The checkpoint itself, or a run folder's newest checkpoint that verifies (damaged newer
    ones are skipped with a warning naming them)."""
    from marft_algos.runs.checkpoint import newest_valid_checkpoint
    from marft_algos.runs.folder import is_complete_checkpoint

    folder = Path(path)
    if not folder.exists():
        raise UsageError(
            f"{str(folder)!r} does not exist; pass a run folder (--output-dir of marft train) or a checkpoint-N folder."
        )
    if is_complete_checkpoint(folder):
        return folder
    latest, skipped = newest_valid_checkpoint(folder)
    if latest is None and skipped:
        raise UsageError(
            f"No checkpoint in {str(folder)!r} verifies ({'; '.join(skipped)}); evaluate another run "
            f"or restore the folder from a backup."
        )
    if latest is None:
        raise UsageError(
            f"{str(folder)!r} is neither a checkpoint nor a run folder with one (no checkpoint-N with a "
            f"manifest.json inside); pass the --output-dir of a marft train run or one of its checkpoints."
        )
    _check_belongs_to_run(folder, latest)
    return latest


def _check_belongs_to_run(folder: Path, checkpoint: Path) -> None:
    """Refuse a run folder's checkpoint that another run wrote (copied in), as --resume does.

    The checkpoint's config must agree with the folder's ``config.json`` on every field that
    makes a different run (:data:`~marft_algos.runs.folder.RESUMABLE_CHANGES` may differ), and on
    the env and model.
    """
    from marft_algos.runs.checkpoint import read_manifest, read_state
    from marft_algos.runs.folder import RESUMABLE_CHANGES, RunDirectory

    try:
        recorded = RunDirectory(folder).read_config()
    except (OSError, ValueError):
        return  # an unreadable config.json is no evidence either way
    if not isinstance(recorded, dict):
        return
    saved = read_state(checkpoint).get("config", {})
    changed = {
        k: (recorded[k], v)
        for k, v in saved.items()
        if k in recorded and k not in RESUMABLE_CHANGES and recorded[k] != v
    }
    run_now, run_then = recorded.get("run") or {}, read_manifest(checkpoint).get("run") or {}
    for key in ("env_id", "model"):
        if run_now.get(key) is not None and run_then.get(key) not in (None, run_now[key]):
            changed[key] = (run_now[key], run_then[key])
    if changed:
        detail = "; ".join(
            f"{k}: run {a!r} vs checkpoint {b!r}" for k, (a, b) in sorted(changed.items())
        )
        raise UsageError(
            f"{checkpoint.name} in {str(folder)!r} was not written by the run recorded in its "
            f"config.json ({detail}); it looks copied from another run. Evaluate that run's folder, "
            f"or pass the checkpoint folder itself ({str(checkpoint)!r}) to evaluate it anyway."
        )


@contextlib.contextmanager
def open_checkpoint(path: str | Path, attempts: int = 5) -> Iterator[Path]:
    """:func:`find_checkpoint`, kept from being pruned while the block reads it.

    A run that is still training prunes its older checkpoints; the one found may go before it is
    pinned, and then the newest is found again.
    """
    from marft_algos.runs.folder import reading_checkpoint

    for _ in range(attempts):
        checkpoint = find_checkpoint(path)
        with reading_checkpoint(checkpoint) as still_there:
            if still_there:
                yield checkpoint
                return
    raise UsageError(
        f"The checkpoints of {str(path)!r} were deleted as fast as they were found ({attempts} "
        f"tries); a training run with --keep-checkpoints 1 is pruning them: try again, or "
        f"evaluate when it has finished."
    )


def run_device_and_dtype(
    run: Mapping[str, Any], device: str | None, dtype: str | None
) -> tuple[str, str]:
    """The device and weight dtype to evaluate a run with: the given ones, else the run's.

    A run trained on a GPU is evaluated on this machine's GPU when it has one (``cuda``: the
    recorded index may not exist here), else on the CPU; the dtype is the one the run trained in
    (float32 for runs that did not record it), so the numbers are the run's.
    """
    import torch

    if device is None:
        recorded = str(run.get("device") or "cpu")
        device = "cuda" if recorded.startswith("cuda") and torch.cuda.is_available() else "cpu"
        if recorded.startswith("cuda") and device == "cpu":
            logger.warning(
                "The run trained on %s but this machine has no GPU: evaluating on the CPU "
                "(slow for a large model; pass --device to choose).",
                recorded,
            )
    return device, dtype or str(run.get("dtype") or "float32")
