"""A run's tasks found again: a run records where its tasks came from, not the tasks
(:mod:`marft_envs.programs.tasks`), so ``marft eval`` and ``marft train --resume`` take them from
the env's registration and check, by the recorded sha256, that they are the run's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from marft_algos.cli.parsing import UsageError

__all__ = ["check_resumed_tasks", "check_same_tasks", "recorded_tasks"]


def _recorded_kwargs(run: Mapping[str, Any], side: str = "eval_env") -> Mapping[str, Any]:
    spec = run.get(side) or run.get("env") or {}
    return spec.get("kwargs") or {}


def check_same_tasks(run: Mapping[str, Any], env: Any) -> None:
    """Refuse, in one line, an env whose tasks are not the ones ``run`` recorded.

    Args:
        run: The run's record (a checkpoint manifest's ``run``).
        env: The env built for evaluation (its spec records its tasks' source).

    Raises:
        UsageError: Naming what changed (a file's sha256, an inline list's) and the fix.
    """
    from marft_envs.programs.tasks import task_source_problem

    spec = getattr(env.unwrapped, "spec", None)
    if spec is None:
        return
    problem = task_source_problem(_recorded_kwargs(run), spec.to_json()["kwargs"])
    if problem is not None:
        raise UsageError(problem)


def check_resumed_tasks(
    saved: Mapping[str, Any] | None, env_id: str, env_kwargs: Mapping[str, Any], allowed: bool
) -> None:
    """Before a resume: refuse, in one line, tasks that are not the ones the run trained on.

    Args:
        saved: The run folder's ``config.json`` (None: nothing saved yet).
        env_id: The env id of the resumed run.
        env_kwargs: The env arguments given now (``--env-kwargs``).
        allowed: ``--allow-config-change``: continue with the tasks found now.

    Raises:
        UsageError: Naming what changed and the fix.
    """
    import marft_envs
    from marft_envs.programs.tasks import task_source_problem

    recorded = _recorded_kwargs((saved or {}).get("run") or {}, "env")
    if allowed or not any(isinstance(recorded.get(k), Mapping) for k in ("tasks", "test_tasks")):
        return  # nothing recorded by its source (not an agent program's run)
    spec = marft_envs.spec(env_id)
    current = dataclasses.replace(spec, kwargs={**spec.kwargs, **env_kwargs}).to_json()["kwargs"]
    problem = task_source_problem(recorded, current)
    if problem is not None:
        raise UsageError(f"{problem} (--allow-config-change resumes with the tasks found now)")


def recorded_tasks(key: str, record: Any, registered: Any) -> tuple[bool, Any]:
    """A recorded task source as an env argument again.

    Args:
        key: ``"tasks"`` or ``"test_tasks"``.
        record: What the run recorded for it.
        registered: What the env's registration records now.

    Returns:
        ``(True, None)`` when the registration holds the recorded tasks (leave them to it),
        ``(True, tasks)`` for a file read again with its hash checked, ``(False, None)`` when
        ``record`` is no task source.

    Raises:
        UsageError: An inline list the registration does not hold, or a missing or changed file.
    """
    from marft_envs.programs.tasks import tasks_from_record

    if not isinstance(record, Mapping) or not ("file" in record or "inline" in record):
        return False, None
    if registered == record:
        return True, None
    try:
        return True, tasks_from_record(record, key)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
