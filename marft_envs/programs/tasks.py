"""The tasks of a program env: where they come from, the checks they pass, and the split.

Tasks are a list (or a ``.json``/``.jsonl`` file of rows, read at registration) or a function of
a numpy generator that draws one. Held-out tasks are ``test_tasks`` when given, otherwise a seeded
share of a ``tasks`` list, split so that no task text is on both sides. ``register_program`` and
:class:`~marft_envs.programs.ProgramEnv` check them with the same function
(:func:`checked_tasks`), so a registration refuses what a run would.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marft_envs.core.data import held_out_rows

__all__ = [
    "SPLITS",
    "TaskSource",
    "Tasks",
    "check_task_kinds",
    "checked_tasks",
    "read_tasks",
    "split_tasks",
]

TaskSource = Sequence[Any] | Callable[[np.random.Generator], Any]

#: The splits a program env serves.
SPLITS = ("train", "test", "all")


def read_tasks(tasks: Any, name: str) -> Any:
    """Tasks as the env takes them: a file path becomes its rows (a ``.jsonl`` file one row a
    line, any other a JSON list); anything else is returned as it is."""
    if tasks is None or callable(tasks) or not isinstance(tasks, (str, os.PathLike)):
        return tasks
    path = Path(tasks)
    if not path.is_file():
        raise FileNotFoundError(
            f"{name}={str(tasks)!r} is not a file; pass a list, a .json/.jsonl file or a function."
        )
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        rows = json.loads(text)
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{name}={str(tasks)!r} holds no list of tasks.")
    return rows


def checked_tasks(tasks: Any, name: str, owner: str | None = None) -> Any:
    """``tasks`` (or ``test_tasks``, by ``name``) when it is a function or a non-empty list;
    ``test_tasks=None`` passes (a share of ``tasks`` is held out).

    Args:
        tasks: What was given.
        name: ``"tasks"`` or ``"test_tasks"``.
        owner: The env id it was given for, named in the message (None: not registered).

    Raises:
        TypeError: Not a list nor a function (a string included).
        ValueError: An empty list.
    """
    if callable(tasks) or (tasks is None and name == "test_tasks"):
        return tasks
    where = f" of {owner!r}" if owner else ""
    fix = "pass a non-empty list, a .json/.jsonl file of rows, or a function of a numpy generator"
    if name == "test_tasks":
        fix += " (or leave test_tasks out: a seeded share of a tasks list is held out)"
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence):
        raise TypeError(f"{name}={tasks!r:.80}{where} is not a list of tasks; {fix}.")
    if not tasks:
        raise ValueError(f"{name}={tasks!r}{where} holds no tasks; {fix}.")
    return tasks


def check_task_kinds(tasks: Any, test_tasks: Any, owner: str | None = None) -> None:
    """Refuse held-out tasks drawn by a function next to a list of training tasks (a list is
    split, a function drawn from: the two cannot be told apart)."""
    if callable(test_tasks) and not callable(tasks):
        where = f" of {owner!r}" if owner else ""
        raise TypeError(
            f"test_tasks{where} is a function but tasks is not; give test_tasks as a list too, "
            f"or tasks as a function of a numpy generator."
        )


def split_tasks(
    tasks: Sequence[Any],
    test_tasks: Sequence[Any] | None,
    split: str,
    *,
    test_size: float,
    seed: int,
) -> list[Any]:
    """The tasks of one split: ``test_tasks`` as the test split, or a seeded held-out share of
    ``tasks`` (no task text on both sides) when none is given."""
    if split == "all":
        return list(tasks) + list(test_tasks or [])
    if test_tasks is not None:
        return list(tasks if split == "train" else test_tasks)
    held = held_out_rows([repr(t) for t in tasks], test_size, seed=seed)
    return [t for i, t in enumerate(tasks) if (i in held) == (split == "test")]


@dataclass
class Tasks:
    """The tasks of one split: a list to pick from (``dataset``), or a function that draws one."""

    dataset: list[Any] | None
    draw: Callable[[np.random.Generator], Any] | None = None

    @classmethod
    def of_split(
        cls,
        tasks: TaskSource,
        test_tasks: TaskSource | None,
        split: str,
        *,
        test_size: float,
        seed: int,
    ) -> Tasks:
        """The ``split`` (``"train"``, ``"test"`` or ``"all"``) of the given tasks."""
        if split not in SPLITS:
            raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}.")
        source = test_tasks if split == "test" and test_tasks is not None else tasks
        if callable(source):
            return cls(dataset=None, draw=source)
        check_task_kinds(tasks, test_tasks)
        checked_tasks(source, "test_tasks" if source is test_tasks else "tasks")
        if split == "test" and test_tasks is not None:
            return cls(dataset=list(source))  # the held-out list (tasks may be a function)
        assert not callable(tasks) and not callable(test_tasks)
        return cls(split_tasks(tasks, test_tasks, split, test_size=test_size, seed=seed))

    def pick(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Any:
        """One episode's task: ``options["index"]`` of the list, else one drawn with ``rng``."""
        if self.dataset is None:
            assert self.draw is not None
            return self.draw(rng)
        index = (
            int(options["index"]) if "index" in options else int(rng.integers(len(self.dataset)))
        )
        if not 0 <= index < len(self.dataset):
            raise IndexError(f"options['index']={index} is outside the {len(self.dataset)} tasks.")
        return self.dataset[index]
