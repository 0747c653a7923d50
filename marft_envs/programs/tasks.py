"""The tasks of a program env: where they come from, the checks they pass, and the split.

Tasks are a list (or a ``.json``/``.jsonl`` file of rows, read at registration) or a function of
a numpy generator that draws one. Held-out tasks are ``test_tasks`` when given, otherwise a seeded
share of a ``tasks`` list, split so that no task text is on both sides. ``register_program`` and
:class:`~marft_envs.programs.ProgramEnv` check them with the same function
(:func:`checked_tasks`), so a registration refuses what a run would.

A run records where its tasks came from, not the tasks (in production they are customer
tickets): ``register_program`` keeps a list as a :class:`TaskList`, which a run's
``config.json``, its checkpoints and ``marft export`` record as its source
(:meth:`TaskList.run_record`): a file's path and sha256, or an inline list's count and sha256 (a
function is recorded by its import path). ``record_tasks=True`` records the rows themselves.
:func:`task_source_problem` tells, in one line, how the tasks found now differ from a record.
"""

from __future__ import annotations

import hashlib
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
    "TaskList",
    "TaskSource",
    "Tasks",
    "check_task_kinds",
    "checked_tasks",
    "read_tasks",
    "split_tasks",
    "task_source_problem",
    "tasks_from_record",
]

TaskSource = Sequence[Any] | Callable[[np.random.Generator], Any]

#: The splits a program env serves.
SPLITS = ("train", "test", "all")


class TaskList(list):  # type: ignore[type-arg]
    """A list of tasks that knows its source, so that a run records the source, not the tasks.

    Args:
        rows: The tasks.
        file: The ``.json``/``.jsonl`` file they were read from (None: given inline).
        sha256: The file's sha256 (with ``file``); an inline list's is computed from its rows.
        record_rows: Record the rows themselves (``register_program(..., record_tasks=True)``).
    """

    def __init__(
        self,
        rows: Sequence[Any],
        *,
        file: str | None = None,
        sha256: str | None = None,
        record_rows: bool = False,
    ) -> None:
        super().__init__(rows)
        self.file = file
        self.sha256 = sha256 if sha256 is not None else _rows_sha256(self)
        self.record_rows = record_rows

    def run_record(self) -> Any:
        """What a run records (``EnvSpec.to_json``): ``{"file", "sha256", "count"}`` for a file,
        ``{"inline", "sha256"}`` (the count and hash) for a list given inline, or the rows with
        ``record_rows``."""
        if self.record_rows:
            return list(self)
        if self.file is not None:
            return {"file": self.file, "sha256": self.sha256, "count": len(self)}
        return {"inline": len(self), "sha256": self.sha256}


def _rows_sha256(rows: Sequence[Any]) -> str:
    text = json.dumps(list(rows), sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_tasks(tasks: Any, name: str, *, record_rows: bool = False) -> Any:
    """Tasks as the env takes them: a file path becomes its rows (a ``.jsonl`` file one row a
    line, any other a JSON list), and a list a :class:`TaskList`, each knowing its source;
    anything else (a function, None) is returned as it is."""
    if isinstance(tasks, Sequence) and not isinstance(tasks, str | bytes):
        if isinstance(tasks, TaskList) and tasks.record_rows == record_rows:
            return tasks
        file, sha = (tasks.file, tasks.sha256) if isinstance(tasks, TaskList) else (None, None)
        return TaskList(tasks, file=file, sha256=sha, record_rows=record_rows)
    if tasks is None or callable(tasks) or not isinstance(tasks, (str, os.PathLike)):
        return tasks
    path = Path(tasks)
    if not path.is_file():
        raise FileNotFoundError(
            f"{name}={str(tasks)!r} is not a file; pass a list, a .json/.jsonl file or a function."
        )
    data = path.read_bytes()
    text = data.decode("utf-8")
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        rows = json.loads(text)
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{name}={str(tasks)!r} holds no list of tasks.")
    sha = hashlib.sha256(data).hexdigest()
    return TaskList(rows, file=os.fspath(tasks), sha256=sha, record_rows=record_rows)


def _is_source(record: Any) -> bool:
    return isinstance(record, Mapping) and ("file" in record or "inline" in record)


def _describe(record: Any) -> str:
    if isinstance(record, Mapping) and "file" in record:
        return f"the file {record['file']} (sha256 {str(record['sha256'])[:12]})"
    if isinstance(record, Mapping) and "inline" in record:
        return f"{record['inline']} inline tasks (sha256 {str(record['sha256'])[:12]})"
    if isinstance(record, Mapping) and "callable" in record:
        return f"the function {record['callable']}"
    if isinstance(record, list):
        return f"{len(record)} recorded tasks"
    return "none" if record is None else "other tasks"


def task_source_problem(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """How the tasks an env has now differ from a run's record of them, in one line.

    Args:
        recorded: The run's recorded env kwargs (``config.json``'s ``run.env.kwargs``).
        current: The same record of the env as it is registered now.

    Returns:
        ``None`` when ``tasks`` and ``test_tasks`` are recorded alike (or the run recorded none),
        else what changed and how to fix it.
    """
    for name in ("tasks", "test_tasks"):
        if name not in recorded:
            continue
        before, now = recorded[name], current.get(name)
        if not isinstance(before, Mapping) or not _is_source(before) or before == now:
            continue
        if "file" in before and isinstance(now, Mapping) and now.get("file") == before["file"]:
            return (
                f"{name} changed since the run: {before['file']} has sha256 "
                f"{str(now.get('sha256'))[:12]} now, the run recorded {str(before['sha256'])[:12]}; "
                f"restore the file the run used, or start a new run."
            )
        return (
            f"{name} changed since the run: it recorded {_describe(before)}, the env has "
            f"{_describe(now)} now; register the run's tasks again, or start a new run."
        )
    return None


def tasks_from_record(record: Mapping[str, Any], name: str) -> TaskList:
    """The tasks a run recorded by their file, read again with the file's hash checked.

    Args:
        record: A :meth:`TaskList.run_record` of a file (``{"file", "sha256", "count"}``).
        name: ``"tasks"`` or ``"test_tasks"``, for the message.

    Raises:
        ValueError: The record is of an inline list (only its count and hash were recorded), or
            the file is missing or changed; the message says which, in one line.
    """
    if "file" not in record:
        raise ValueError(
            f"the run recorded only the count and sha256 of its {record.get('inline')} inline "
            f"{name}, not the tasks; register them again (import the module that registers the "
            f"env), or register with record_tasks=True."
        )
    path = Path(record["file"])
    if not path.is_file():
        raise ValueError(
            f"the run's {name} file {record['file']} is missing; put it back (sha256 "
            f"{str(record['sha256'])[:12]}), or run from the folder the run used."
        )
    rows = read_tasks(path, name)
    if rows.sha256 != record["sha256"]:
        raise ValueError(
            f"{name} changed since the run: {record['file']} has sha256 {rows.sha256[:12]} now, "
            f"the run recorded {str(record['sha256'])[:12]}; restore the file the run used."
        )
    return TaskList(rows, file=record["file"], sha256=rows.sha256)


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
