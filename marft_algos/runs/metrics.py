"""Metrics sinks: ``metrics.jsonl`` (one record per iteration) and optional TensorBoard.

Every trainer uses the same names: ``rollout/...``, ``train/policy_loss``, ``train/value_loss``,
``train/approx_kl``, ``train/clip_fraction``, ``train/entropy``, ``eval/accuracy``, ``time/...``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger"]

logger = logging.getLogger(__name__)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them visible instead of crashing
    return value


class MetricsLogger:
    """Appends metric records to ``<output_dir>/metrics.jsonl`` and, optionally, TensorBoard.

    Args:
        output_dir: Run directory; None keeps records in memory only.
        tensorboard: Also write TensorBoard scalars under ``<output_dir>/tensorboard``.
    """

    def __init__(self, output_dir: str | Path | None, *, tensorboard: bool = False) -> None:
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.records: list[dict[str, Any]] = []
        self._writer = None
        if self.output_dir is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError as exc:
                    raise ImportError(
                        "tensorboard=True needs the tensorboard package: pip install tensorboard"
                    ) from exc
                self._writer = SummaryWriter(str(self.output_dir / "tensorboard"))
        elif tensorboard:
            raise ValueError("tensorboard=True needs an output_dir to write to.")

    @property
    def path(self) -> Path | None:
        return self.output_dir / "metrics.jsonl" if self.output_dir is not None else None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record one iteration's metrics."""
        record = {"iteration": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self.records.append(record)
        if self.path is not None:
            try:
                with self.path.open("a") as f:
                    f.write(json.dumps(record) + "\n")
            except OSError as exc:
                from marft_algos.runs.folder import disk_full_error

                full = disk_full_error(exc, self.path.parent)
                if full is None:
                    raise
                # A torn last line is dropped on reading, so the folder stays resumable.
                raise full from exc
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def log_text(self, tag: str, text: str, step: int) -> None:
        """Send text (e.g. held-out transcripts) to TensorBoard, when it is on."""
        if self._writer is not None:
            self._writer.add_text(tag, text, step)
            self._writer.flush()

    def read(self) -> list[dict[str, Any]]:
        """The records in ``metrics.jsonl``; a torn last line (a kill mid-write) is dropped with a
        warning, any other unreadable line is an error naming it."""
        if self.path is None or not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if number == len(lines):
                    logger.warning(
                        "Dropping the torn last line of %s (the run was killed while writing it).",
                        self.path,
                    )
                    continue
                raise ValueError(
                    f"Line {number} of {self.path} is not JSON ({line[:80]!r}); the file was edited or "
                    f"corrupted. Fix or delete that line to resume."
                ) from None
        return records

    def truncate_after(self, step: int) -> None:
        """Keep only records up to ``step`` (a resumed run rewrites the iterations after its
        checkpoint); the file is replaced atomically and :attr:`records` reloaded from it."""
        kept = [
            r
            for r in (self.read() if self.path is not None else self.records)
            if r["iteration"] <= step
        ]
        self.records = kept
        if self.path is not None and self.path.exists():
            from marft_algos.runs.folder import write_atomic

            write_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
