"""What an agent program did next, wherever it runs (a thread or a child process)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marft_envs.programs.client import CallRecord

__all__ = ["Event", "run_program"]


@dataclass
class Event:
    """What the program did next: ``kind`` is ``"call"``, ``"return"``, ``"error"`` or ``"timeout"``."""

    kind: str
    call: CallRecord | None = None
    value: Any = None
    error: BaseException | None = None
    traceback: str = ""
    at: float = 0.0
    """The program's own time (seconds, model time excluded) when it happened."""


def run_program(program: Callable[..., Any], task: Any, client: Any) -> Any:
    """``program(task, client)``, awaited when it is a coroutine."""
    result = program(task, client)
    if inspect.isawaitable(result):
        result = asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
