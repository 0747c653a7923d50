"""Training progress for entry points: a rich bar on a terminal, one log line per iteration elsewhere."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["TrainingProgress"]

progress_logger = logging.getLogger("marft_algos.progress")
"""One INFO line per iteration in ``"plain"`` mode (CI logs, files)."""


class TrainingProgress:
    """A rich progress bar or one log line per iteration with the latest key metrics, or nothing."""

    KEYS = ("rollout/reward_mean", "eval/accuracy", "train/policy_loss", "train/entropy")

    def __init__(self, mode: bool | str, total: int, done: int) -> None:
        if mode == "auto":
            mode = "rich" if sys.stderr.isatty() else "plain"
        self.mode = "rich" if mode is True else (mode or "off")
        if self.mode not in ("rich", "plain", "off"):
            raise ValueError(
                f"progress must be True, False, 'rich', 'plain' or 'auto', got {mode!r}."
            )
        self.enabled = self.mode == "rich"
        self.total, self.done = total, done
        self._progress: Any = None

    def __enter__(self) -> TrainingProgress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]training"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[metrics]}"),
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                "train", total=self.total, completed=self.done, metrics=""
            )
        return self

    def update(self, metrics: Mapping[str, Any], *, advance: bool = True) -> None:
        shown = " ".join(
            f"{k.split('/')[-1]}={metrics[k]:.3f}"
            for k in self.KEYS
            if isinstance(metrics.get(k), int | float)
        )
        self.done += int(advance)
        if self.mode == "plain":
            progress_logger.info("iteration %d/%d %s", self.done, self.total, shown)
        if self._progress is None:
            return
        self._progress.update(self._task, metrics=shown, advance=1 if advance else 0)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
