"""The environment registry: versioned ids mapped to lazy entry points.

A registration is data: an id ending in a version (``math-dual-v0``), an entry point (a class, a
callable, or a lazy ``"module:attr"`` string) and default keyword arguments. :func:`make` merges
overrides into the defaults, builds the env and wraps it so that API misuse fails loudly.
Any change to an env's prompts, data, grading or rewards gets a new version.
"""

from __future__ import annotations

import difflib
import importlib
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pettingzoo import AECEnv
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

__all__ = [
    "EntryPointError",
    "EnvSpec",
    "UnknownEnvError",
    "make",
    "pprint_registry",
    "register",
    "registry",
    "spec",
]

_ID_PATTERN = re.compile(r"^(?:(?P<namespace>[A-Za-z0-9_.\-]+)/)?(?P<name>[A-Za-z0-9_.\-]+?)-v(?P<version>\d+)$")


class UnknownEnvError(LookupError):
    """Raised by :func:`make` / :func:`spec` for an id that is not registered."""


class EntryPointError(ImportError):
    """Raised by :func:`make` when a registered entry point cannot be loaded or called."""


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment.

    Attributes:
        id: ``[namespace/]name-vN``.
        entry_point: Env class, callable returning an env, or ``"package.module:attr"``.
        kwargs: Default keyword arguments; :func:`make` overrides merge over them.
        description: One line shown by :func:`pprint_registry`.
        order_enforcing: Wrap the env in :class:`EnforcedOrder` (PettingZoo's order checks) at :func:`make`.
    """

    id: str
    entry_point: str | Callable[..., AECEnv]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    order_enforcing: bool = True

    @property
    def name(self) -> str:
        """The id without its version suffix."""
        match = _ID_PATTERN.match(self.id)
        assert match is not None
        namespace = match["namespace"]
        return f"{namespace}/{match['name']}" if namespace else match["name"]

    @property
    def version(self) -> int:
        match = _ID_PATTERN.match(self.id)
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
        """Build the env with ``kwargs`` updated by ``overrides``."""
        factory = self.load()
        kwargs = {**self.kwargs, **overrides}
        try:
            env = factory(**kwargs)
        except TypeError as exc:
            raise TypeError(f"Could not build {self.id!r} with arguments {sorted(kwargs)}: {exc}") from exc
        if not isinstance(env, AECEnv):
            raise EntryPointError(
                f"Entry point of {self.id!r} returned {type(env).__name__}, not a PettingZoo AECEnv."
            )
        if self.order_enforcing:
            env = EnforcedOrder(env)
        return env


class EnforcedOrder(OrderEnforcingWrapper):
    """PettingZoo's order checks, but stepping a finished episode is an error, not a log line."""

    def step(self, action: Any) -> None:
        if self._has_reset and not self.agents:
            raise RuntimeError(
                "step() was called after the episode ended (no live agents). Call reset() to start "
                "a new episode."
            )
        super().step(action)


registry: dict[str, EnvSpec] = {}
"""All registered environments, by id."""


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
        id: ``[namespace/]name-vN``, e.g. ``"math-dual-v0"`` or ``"myorg/triage-v1"``.
        entry_point: Env class, callable returning an ``AECEnv``, or ``"module:attr"`` (imported at
            :func:`make`, so registering costs nothing).
        kwargs: Default constructor arguments.
        description: One line for :func:`pprint_registry`.
        order_enforcing: Wrap in PettingZoo's ``OrderEnforcingWrapper`` (recommended).

    Returns:
        The new :class:`EnvSpec`. Registering an existing id replaces it with a warning.
    """
    if not isinstance(id, str) or not _ID_PATTERN.match(id):
        raise ValueError(
            f"Env id {id!r} must look like 'name-vN' or 'namespace/name-vN' (e.g. 'math-dual-v0'); "
            f"the version suffix is required so behaviour changes get new ids."
        )
    if not (isinstance(entry_point, str) or callable(entry_point)):
        raise TypeError(f"entry_point of {id!r} must be a class, a callable or 'module:attr', got {entry_point!r}.")
    if id in registry:
        warnings.warn(f"Overriding environment {id!r} already in the registry.", UserWarning, stacklevel=2)
    new = EnvSpec(
        id=id,
        entry_point=entry_point,
        kwargs=dict(kwargs or {}),
        description=description,
        order_enforcing=order_enforcing,
    )
    registry[id] = new
    return new


def spec(id: str) -> EnvSpec:
    """The :class:`EnvSpec` registered under ``id``; an unknown id names the closest ones."""
    try:
        return registry[id]
    except KeyError:
        pass
    match = _ID_PATTERN.match(id) if isinstance(id, str) else None
    if match is not None:
        base = id[: id.rfind("-v")]
        versions = sorted(s.id for s in registry.values() if s.name == base)
        if versions:
            raise UnknownEnvError(f"Environment {id!r} is not registered; available versions: {versions}.")
    close = difflib.get_close_matches(str(id), list(registry), n=3, cutoff=0.5)
    hint = f" Did you mean {close}?" if close else ""
    raise UnknownEnvError(
        f"No environment registered as {id!r}.{hint} Run marft_envs.pprint_registry() to list them."
    )


def make(id: str, **overrides: Any) -> AECEnv:
    """Build a registered environment.

    Args:
        id: A registered id, e.g. ``"math-dual-v0"``.
        **overrides: Constructor arguments that replace the registered defaults
            (e.g. ``dataset=...``, ``dependency=...``, ``render_mode="ansi"``).
    """
    return spec(id).make(**overrides)


def pprint_registry(*, print_output: bool = True) -> str:
    """A table of every registered environment; printed unless ``print_output=False``."""
    width = max((len(i) for i in registry), default=2)
    lines = [f"{'id':<{width}}  description", f"{'-' * width}  -----------"]
    lines += [f"{s.id:<{width}}  {s.description}" for s in sorted(registry.values(), key=lambda s: s.id)]
    text = "\n".join(lines)
    if print_output:
        print(text)
    return text
