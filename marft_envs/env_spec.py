"""What one registration is: :class:`EnvSpec` (an id ending in its version, a lazy entry point,
default keyword arguments), the errors :func:`~marft_envs.registration.make` raises, and the
wrapper that makes API misuse fail loudly. The registry itself is in
:mod:`marft_envs.registration`."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pettingzoo import AECEnv
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

from marft_envs.core.data import DataFamily, data_family_of
from marft_envs.core.dependency import DependencyFunction

__all__ = [
    "ID_PATTERN",
    "EnforcedOrder",
    "EntryPointError",
    "EnvSpec",
    "OutdatedEnvWarning",
    "UnknownEnvError",
]

#: ``[namespace/]name-vN``: what every registered id looks like.
ID_PATTERN = re.compile(
    r"^(?:(?P<namespace>[A-Za-z0-9_.\-]+)/)?(?P<name>[A-Za-z0-9_.\-]+?)-v(?P<version>\d+)$"
)


class UnknownEnvError(LookupError):
    """Raised by :func:`~marft_envs.registration.make` / :func:`~marft_envs.registration.spec` for an id that is not registered."""


class OutdatedEnvWarning(FutureWarning):
    """Warned by :func:`~marft_envs.registration.make` for an out-of-date id that still makes (see :func:`~marft_envs.registration.deprecate`)."""


class EntryPointError(ImportError):
    """Raised by :func:`~marft_envs.registration.make` when a registered entry point cannot be loaded or called."""


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment.

    Attributes:
        id: ``[namespace/]name-vN``.
        entry_point: Env class, callable returning an env, or ``"package.module:attr"``.
        kwargs: Default keyword arguments; :func:`~marft_envs.registration.make` overrides merge over them.
        description: One line shown by :func:`~marft_envs.registration.pprint_registry`.
        order_enforcing: Wrap the env in :class:`EnforcedOrder` (PettingZoo's order checks) at :func:`~marft_envs.registration.make`.
    """

    id: str
    entry_point: str | Callable[..., AECEnv]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    order_enforcing: bool = True

    @property
    def name(self) -> str:
        """The id without its version suffix."""
        match = ID_PATTERN.match(self.id)
        assert match is not None
        namespace = match["namespace"]
        return f"{namespace}/{match['name']}" if namespace else match["name"]

    @property
    def version(self) -> int:
        match = ID_PATTERN.match(self.id)
        assert match is not None
        return int(match["version"])

    def load(self) -> Callable[..., AECEnv]:
        """Resolve the entry point to a callable, importing lazily if it is a string."""
        if not isinstance(self.entry_point, str):
            return self.entry_point
        module_name, sep, attr = self.entry_point.partition(":")
        if not sep or not module_name or not attr:
            raise EntryPointError(
                f"Entry point {self.entry_point!r} of {self.id!r} must look like 'package.module:attr'."
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise EntryPointError(
                f"Cannot import module {module_name!r} for env {self.id!r} "
                f"(entry point {self.entry_point!r}): {exc}"
            ) from exc
        try:
            return getattr(module, attr)
        except AttributeError:
            raise EntryPointError(
                f"Module {module_name!r} has no attribute {attr!r} (entry point of {self.id!r})."
            ) from None

    def make(self, **overrides: Any) -> AECEnv:
        """Build the env with ``kwargs`` updated by ``overrides``.

        Dependency functions among the arguments are copied for this env (see the module notes);
        the env carries ``spec`` (this spec with the merged kwargs) on its unwrapped instance.
        """
        factory = self.load()
        merged = {**self.kwargs, **overrides}
        kwargs = {k: _own_copy(v) for k, v in merged.items()}
        try:
            env = factory(**kwargs)
        except TypeError as exc:
            raise TypeError(
                f"Could not build {self.id!r} with arguments {sorted(kwargs)}: {exc}"
            ) from exc
        if not isinstance(env, AECEnv):
            raise EntryPointError(
                f"Entry point of {self.id!r} returned {type(env).__name__}, not a PettingZoo AECEnv."
            )
        env.unwrapped.spec = dataclasses.replace(self, kwargs=merged)
        if self.order_enforcing:
            env = EnforcedOrder(env)
        return env

    def accepts(self, name: str) -> bool:
        """Whether the entry point takes a keyword argument ``name`` (e.g. ``"dataset"``)."""
        import inspect

        factory = self.load()
        try:
            params = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            return False
        if name in params:
            return params[name].kind in (
                params[name].POSITIONAL_OR_KEYWORD,
                params[name].KEYWORD_ONLY,
            )
        return False

    @property
    def data_family(self) -> DataFamily | None:
        """How the env's problems are named and loaded (``dataset=``), if its class declares it."""
        if not self.accepts("dataset"):
            return None
        return data_family_of(self.load())

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON-ready data: id, entry point and kwargs (values JSON cannot hold are
        written as ``{"repr": ...}`` so a reader sees them but cannot mistake them for data)."""
        entry = (
            self.entry_point if isinstance(self.entry_point, str) else _qualname(self.entry_point)
        )
        return {
            "id": self.id,
            "entry_point": entry,
            "kwargs": {k: _jsonable(v) for k, v in self.kwargs.items()},
        }


def _own_copy(value: Any) -> Any:
    """A private copy of a dependency function (routers keep per-episode state); other values as is."""
    return copy.deepcopy(value) if isinstance(value, DependencyFunction) else value


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(obj)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    record = getattr(value, "run_record", None)
    if callable(record):  # a value that says how a run records it (TaskList: its source)
        return record()
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _jsonable(v) for k, v in value.items()}
    if callable(value) and hasattr(value, "__qualname__"):
        return {"callable": _qualname(value)}  # stable across processes, unlike its repr
    return {"repr": repr(value)[:200]}


class EnforcedOrder(OrderEnforcingWrapper):
    """PettingZoo's order checks, but stepping a finished episode is an error, not a log line."""

    def step(self, action: Any) -> None:
        if self._has_reset and not self.agents:
            raise RuntimeError(
                "step() was called after the episode ended (no live agents). Call reset() to start "
                "a new episode."
            )
        super().step(action)
