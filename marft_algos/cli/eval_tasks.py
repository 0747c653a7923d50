"""The held-out env ``marft eval`` runs: the run's env id and arguments, its tasks found again.

A run records its env arguments as JSON: a function as ``{"callable": "module:qualname"}`` (imported
again, or left to the registration that holds it), an agent program's tasks by their source (a
file's path and sha256, a function's import path: :mod:`marft_algos.cli.task_sources`), a data
family's problems by its data plan (:mod:`marft_algos.cli.data`). ``--env`` and ``--dataset``
replace them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from marft_algos.cli.data import family_of, load_part, plan_data, split_kwargs
from marft_algos.cli.parsing import UsageError
from marft_algos.cli.task_sources import check_same_tasks, recorded_tasks

__all__ = ["held_out_env", "recorded_env_kwargs"]


def held_out_env(
    checkpoint: object,
    manifest: Mapping[str, Any],
    env: str | None = None,
    dataset: str | None = None,
    filters: Mapping[str, str | None] | None = None,
) -> tuple[str, Callable[[], Any]]:
    """The env id and a factory of the held-out env of the run ``manifest`` describes.

    Args:
        checkpoint: The checkpoint (named in errors).
        manifest: Its manifest (the run's record is ``manifest["run"]``).
        env: Another env id (default: the run's).
        dataset: Held-out problems instead of the run's (a data family's source).
        filters: With ``dataset``: ``levels`` and ``subjects`` to keep.

    Raises:
        UsageError: the env is not recorded, the tasks changed since the run, or the env's agents
            are not the checkpoint's.
    """
    import marft_envs

    run = manifest.get("run") or {}
    env_id = env or run.get("env_id") or (run.get("eval_env") or run.get("env") or {}).get("id")
    if env_id is None:
        raise UsageError(
            f"{checkpoint} does not record its env (an older checkpoint); pass --env ID."
        )
    kwargs = recorded_env_kwargs(run, dataset is not None, env_id)
    data = run.get("data")
    family = family_of(env_id)
    if dataset is not None and family is not None:
        data = plan_data(family, None, dataset, dict(filters or {}))
    if data is not None and family is not None:
        kwargs["dataset"] = load_part(family, data["eval"])
    kwargs = split_kwargs(env_id, kwargs, "eval")
    env_fn = lambda: marft_envs.make(env_id, **kwargs)  # noqa: E731
    probe = env_fn()
    check_same_tasks(run, probe)  # the tasks the run recorded by their source and sha256
    agents = list(probe.possible_agents)
    if agents != list(manifest["agents"]):
        raise UsageError(
            f"The checkpoint's agents {manifest['agents']} do not match {env_id}'s agents {agents}; evaluate "
            f"on the env it was trained on (leave --env out) or one with the same team."
        )
    return env_id, env_fn


def recorded_env_kwargs(
    run: Mapping[str, Any], dataset_given: bool, env_id: str | None = None
) -> dict[str, Any]:
    """The env arguments the run recorded, rebuilt (functions imported, tasks found by their
    source); ``dataset_given``: the caller replaces the held-out dataset."""
    if run.get("env_kwargs") is not None:
        return dict(run["env_kwargs"])
    spec = run.get("eval_env") or run.get("env") or {}
    kwargs = dict(spec.get("kwargs") or {})
    # Values JSON could not hold were recorded as {"repr": ...}; they cannot be rebuilt.
    opaque = sorted(k for k, v in kwargs.items() if isinstance(v, dict) and set(v) == {"repr"})
    if "dataset" in opaque and not dataset_given and run.get("data") is None:
        raise UsageError(
            f"The run passed its held-out dataset as an object ({kwargs['dataset']['repr']}), which "
            f"cannot be rebuilt from the checkpoint; pass --dataset with the same problems."
        )
    out = {k: v for k, v in kwargs.items() if k not in opaque}
    # A function is recorded as {"callable": "module:qualname"}: the env's registered one (e.g.
    # register_program's program) is left to the registry; any other is imported again.
    import marft_envs

    spec = marft_envs.registry.get(env_id) if env_id is not None else None
    registered = spec.to_json()["kwargs"] if spec is not None else {}
    for key, value in list(out.items()):
        is_tasks, tasks = recorded_tasks(key, value, registered.get(key))  # a source, not rows
        if is_tasks and tasks is None:
            del out[key]  # the registration holds the recorded tasks
        elif is_tasks:
            out[key] = tasks
        elif isinstance(value, dict) and set(value) == {"callable"}:
            if registered.get(key) == value:
                del out[key]
            else:
                out[key] = _import_callable(key, value["callable"])
    return out


def _import_callable(key: str, name: str) -> Any:
    """The function a run record names as ``module:qualname`` (how it records a callable env
    argument, e.g. an agent program), imported here."""
    import importlib

    module, _, qualname = name.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError):
        raise UsageError(
            f"The run passed its env argument {key!r} as the function {name}, which cannot be "
            f"imported here; run marft eval where that module is importable (e.g. from its folder "
            f"or with it on PYTHONPATH)."
        ) from None
    return found
