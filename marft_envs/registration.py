"""The environment registry: versioned ids mapped to lazy entry points.

A registration is data: an id ending in a version (``math-dual-v7``), an entry point (a class, a
callable, or a lazy ``"module:attr"`` string) and default keyword arguments. :func:`make` merges
overrides into the defaults, builds the env, stamps the resulting :class:`EnvSpec` on it
(``env.unwrapped.spec``, as gymnasium does) and wraps it so that API misuse fails loudly.
Any change to an env's prompts, data, grading or rewards gets a new version.

Envs from other packages reach the registry two ways, as in gymnasium:

- ``make("my_package.my_module:triage-v0")`` imports ``my_package.my_module`` (which calls
  :func:`register`) and then makes ``triage-v0``;
- an installed package declares an entry point in the :data:`ENTRY_POINT_GROUP` group
  (``[project.entry-points."marft_envs.envs"]``, ``my_package = "my_package.envs"``); the first
  lookup of an unknown id, and :func:`pprint_registry`, load every such entry point (a module is
  imported, a callable is called).

Every :func:`make` gives the env its own copy of each
:class:`~marft_envs.core.dependency.DependencyFunction` found in the kwargs, so a stateful router
registered once never shares its state between env copies.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import logging
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from pettingzoo import AECEnv

from marft_envs.core.modules import import_user_module
from marft_envs.env_spec import (
    ID_PATTERN,
    EntryPointError,
    EnvSpec,
    OutdatedEnvWarning,
    UnknownEnvError,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "EntryPointError",
    "EnvSpec",
    "OutdatedEnvWarning",
    "UnknownEnvError",
    "deprecate",
    "deprecated",
    "make",
    "pprint_registry",
    "register",
    "register_program",
    "registry",
    "retire",
    "retired",
    "spec",
    "split_env_id",
]

logger = logging.getLogger(__name__)

#: Entry-point group through which installed packages register their envs.
ENTRY_POINT_GROUP = "marft_envs.envs"

registry: dict[str, EnvSpec] = {}
#: Ids that existed and were withdrawn, with the reason and the id to use instead.
retired: dict[str, str] = {}


def retire(id: str, reason: str) -> None:
    """Withdraw an id whose behaviour cannot be kept (as gymnasium deprecates old versions):
    :func:`make` then raises :class:`UnknownEnvError` with ``reason`` instead of a bare
    "not registered"."""
    registry.pop(id, None)
    retired[id] = reason


#: Out-of-date ids that still make: id → (the id built instead, what changed).
deprecated: dict[str, tuple[str, str]] = {}


def deprecate(id: str, successor: str, what_changed: str) -> None:
    """Keep an out-of-date id working, as gymnasium does for old versions: :func:`make` builds
    ``successor`` instead and warns (:class:`OutdatedEnvWarning`) with the newest version and
    ``what_changed``. Use it when the old behaviour is not kept (a bug fix); register the old
    version itself to keep it.

    Args:
        id: The out-of-date id, e.g. ``"math-dual-v0"``.
        successor: A registered id it now builds, e.g. ``"math-dual-v7"``.
        what_changed: One or two sentences for the warning: what the successor does differently.
    """
    if not isinstance(id, str) or not ID_PATTERN.match(id):
        raise ValueError(f"Env id {id!r} must look like 'name-vN' or 'namespace/name-vN'.")
    if successor not in registry and successor not in deprecated:
        raise ValueError(
            f"Cannot deprecate {id!r}: its successor {successor!r} is not registered; register "
            f"{successor!r} first."
        )
    registry.pop(id, None)
    retired.pop(id, None)
    deprecated[id] = (successor, what_changed)


def _outdated(id: str) -> EnvSpec:
    """The spec an out-of-date id builds, after warning what it now means."""
    successor, what_changed = deprecated[id]
    target = spec(successor)
    newest = max(
        (s for s in registry.values() if s.name == target.name), key=lambda s: s.version
    ).id
    warnings.warn(
        f"Environment {id!r} is out of date: the newest version is {newest!r}. What changed: "
        f"{what_changed} make({id!r}) now builds {successor!r} (its spec, and a run's records, "
        f"say {successor!r}); ask for {newest!r} to silence this warning.",
        OutdatedEnvWarning,
        stacklevel=4,
    )
    return target


def register(
    id: str,
    entry_point: str | Callable[..., AECEnv],
    kwargs: Mapping[str, Any] | None = None,
    *,
    description: str = "",
    order_enforcing: bool = True,
) -> EnvSpec:
    """Register an environment under a versioned id.

    Args:
        id: ``[namespace/]name-vN``, e.g. ``"math-dual-v7"`` or ``"myorg/triage-v1"``.
        entry_point: Env class, callable returning an ``AECEnv``, or ``"module:attr"`` (imported at
            :func:`make`, so registering costs nothing).
        kwargs: Default constructor arguments.
        description: One line for :func:`pprint_registry`.
        order_enforcing: Wrap in PettingZoo's ``OrderEnforcingWrapper`` (recommended).

    Returns:
        The new :class:`EnvSpec`. Registering an existing id replaces it with a warning.
    """
    if not isinstance(id, str) or not ID_PATTERN.match(id):
        raise ValueError(
            f"Env id {id!r} must look like 'name-vN' or 'namespace/name-vN' (e.g. 'math-dual-v7'); "
            f"the version suffix is required so behaviour changes get new ids."
        )
    if not (isinstance(entry_point, str) or callable(entry_point)):
        raise TypeError(
            f"entry_point of {id!r} must be a class, a callable or 'module:attr', got {entry_point!r}."
        )
    if id in registry:
        warnings.warn(
            f"Overriding environment {id!r} already in the registry.", UserWarning, stacklevel=2
        )
    new = EnvSpec(
        id=id,
        entry_point=entry_point,
        kwargs=dict(kwargs or {}),
        description=description,
        order_enforcing=order_enforcing,
    )
    registry[id] = new
    return new


def register_program(
    id: str,
    program: Callable[..., Any],
    *,
    agents: Any,
    tasks: Any,
    test_tasks: Any = None,
    description: str = "",
    record_tasks: bool = False,
    **kwargs: Any,
) -> EnvSpec:
    """Register an agent program as an env id (see :mod:`marft_envs.programs`).

    ``program(task, client)`` runs one episode of the team with
    ``client.chat.completions.create(model=AGENT, messages=...)`` (the ``openai`` client surface)
    and returns its reward: a number, or named parts such as ``{"success": 1.0, "cost": -0.15}``.

    Args:
        id: Versioned id, e.g. ``"helpdesk-v0"``; bump it when the program, its prompts, tasks or
            reward change.
        program: The team, as a function or ``async def`` of ``(task, client)``.
        agents: The agent names the program passes as ``model`` (or their profiles).
        tasks: Training tasks: a list, a ``.json``/``.jsonl`` file of rows, or a function of a numpy
            generator.
        test_tasks: Held-out tasks for evaluation (default: a seeded share of a ``tasks`` list).
        description: One line for :func:`pprint_registry`.
        record_tasks: Record the task lists themselves in a run's ``config.json``, checkpoints
            and ``marft export``. By default only their source is: a file's path and sha256, an
            inline list's count and sha256, a function's import path; ``marft eval`` and
            ``--resume`` find the tasks through this registration and refuse, in one line, tasks
            that changed (:mod:`marft_envs.programs.tasks`).
        **kwargs: More :class:`~marft_envs.programs.ProgramEnv` arguments: ``split`` and the
            fields of :class:`~marft_envs.programs.ProgramSettings` (``reward_weights``,
            ``credit``, ``max_calls``, ``episode_timeout``, ``error_reward``, the request bounds
            ``max_request_bytes``, ``max_messages``, ``max_concurrent_calls``, ...).
    """
    if not callable(program):
        raise TypeError(
            f"program of {id!r} must be a function program(task, client), got {program!r:.80}."
        )
    from marft_envs.programs.tasks import check_task_kinds, checked_tasks, read_tasks

    check_task_kinds(tasks, test_tasks, owner=id)
    return register(
        id,
        "marft_envs.programs.env:ProgramEnv",
        kwargs={
            "program": program,
            "agents": list(agents),
            "tasks": checked_tasks(
                read_tasks(tasks, "tasks", record_rows=record_tasks), "tasks", owner=id
            ),
            "test_tasks": checked_tasks(
                read_tasks(test_tasks, "test_tasks", record_rows=record_tasks),
                "test_tasks",
                owner=id,
            ),
            **kwargs,
        },
        description=description or f"agent program {getattr(program, '__qualname__', program)!r}",
    )


_plugins_loaded = False


def load_plugins() -> list[str]:
    """Load every installed ``marft_envs.envs`` entry point once (import a module, call a callable).

    Returns:
        The entry points loaded by this call (empty after the first call). A plugin that fails to
        load is skipped with a warning naming it, so one broken package cannot hide the others.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return []
    _plugins_loaded = True
    loaded = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = entry.load()
            if callable(target):
                target()
        except Exception as exc:  # a broken third-party plugin must not break make() of others
            warnings.warn(
                f"Could not load marft env plugin {entry.name!r} ({entry.value}): {exc}",
                UserWarning,
                stacklevel=2,
            )
            continue
        loaded.append(entry.name)
    return loaded


def split_env_id(env_id: str) -> tuple[str | None, str]:
    """``"pkg.module:name-v0"`` → ``("pkg.module", "name-v0")``; a plain id → ``(None, id)``."""
    module, sep, name = env_id.rpartition(":")
    return (module, name) if sep else (None, env_id)


def _import_env_module(module: str, env_id: str) -> None:
    try:
        import_user_module(module)
    except ImportError as exc:
        raise EntryPointError(
            f"Cannot import {module!r} for env {env_id!r}: {exc}. The part before ':' must be an "
            f"importable module that registers the env (check the name and that its package is installed)."
        ) from exc


def spec(id: str) -> EnvSpec:
    """The :class:`EnvSpec` registered under ``id``; an unknown id names the closest ones.

    ``"package.module:name-vN"`` imports ``package.module`` first (it registers the env); an id
    not yet registered loads the installed plugins (:func:`load_plugins`) before giving up.
    """
    if isinstance(id, str):
        module, id = split_env_id(id)
        if module is not None:
            _import_env_module(module, id)
    try:
        return registry[id]
    except KeyError:
        pass
    if isinstance(id, str) and id in deprecated:
        return _outdated(id)
    if load_plugins() and id in registry:
        return registry[id]
    if isinstance(id, str) and id in retired:
        raise UnknownEnvError(f"Environment {id!r} was retired: {retired[id]}")
    match = ID_PATTERN.match(id) if isinstance(id, str) else None
    if match is not None:
        base = id[: id.rfind("-v")]
        versions = sorted(s.id for s in registry.values() if s.name == base)
        if versions:
            raise UnknownEnvError(
                f"Environment {id!r} is not registered; available versions: {versions}."
            )
    # Compare names without their versions, so "relays-v0" is not "close" to every "*-v0".
    names = sorted({s.name for s in registry.values()})
    wanted = id[: id.rfind("-v")] if match is not None else str(id)
    close_names = difflib.get_close_matches(wanted, names, n=3, cutoff=0.5)
    close = [s.id for name in close_names for s in registry.values() if s.name == name][:3]
    hint = f" Did you mean {close}?" if close else ""
    raise UnknownEnvError(
        f"No environment registered as {id!r}.{hint} Run marft_envs.pprint_registry() to list them."
    )


def make(id: str, **overrides: Any) -> AECEnv:
    """Build a registered environment.

    Args:
        id: A registered id, e.g. ``"math-dual-v7"``.
        **overrides: Constructor arguments that replace the registered defaults
            (e.g. ``dataset=...``, ``dependency=...``, ``render_mode="ansi"``).
    """
    return spec(id).make(**overrides)


def pprint_registry(*, print_output: bool = True) -> str:
    """A table of every registered environment (plugins included); printed unless ``print_output=False``."""
    load_plugins()
    width = max((len(i) for i in registry), default=2)
    lines = [f"{'id':<{width}}  description", f"{'-' * width}  -----------"]
    lines += [
        f"{s.id:<{width}}  {s.description}" for s in sorted(registry.values(), key=lambda s: s.id)
    ]
    text = "\n".join(lines)
    if print_output:
        print(text)
    return text
