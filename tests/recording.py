"""A trainer run that records what each update receives (a module of its own, like ``budgets``:
importable from every test folder)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def train_recording(trainer: Any, record: Callable[[list[Any]], None]) -> list[dict[str, Any]]:
    """``trainer.train()``, calling ``record(episodes)`` with each batch before its update; the
    trainer is closed however the run ends. Returns the run's records."""
    update = trainer.update

    def recording(episodes):
        record(episodes)
        return update(episodes)

    trainer.update = recording
    try:
        return trainer.train()
    finally:
        trainer.close()
