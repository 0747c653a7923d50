"""Agent profiles: who an agent is, as plain data.

A profile is the paper's ``inst^i`` (§3.2, Appendix B.3): a role name, the system prompt that sets the
agent's character, and whether the environment grades this agent's output (the paper's
``with_answer``). Profiles never contain tokenizer-specific text; chat templates belong to the policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_ROLE_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")

__all__ = ["AgentProfile", "as_profiles", "check_graded", "named_team"]


@dataclass(frozen=True)
class AgentProfile:
    """One agent of a team.

    Attributes:
        role: Unique agent name; also the PettingZoo agent id (letters, digits, ``_`` and ``-``).
        system_prompt: The role prompt shown to the agent as its system message.
        graded: Whether the environment grades this agent's output (the paper's ``with_answer``).
        metadata: Free data for tasks, routers and policies (e.g. a preferred model name).
    """

    role: str
    system_prompt: str = ""
    graded: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.role, str) or not _ROLE_PATTERN.match(self.role):
            raise ValueError(
                f"AgentProfile.role must start with a letter and contain only letters, digits, "
                f"'_' or '-'; got {self.role!r}. Rename the agent, e.g. 'reasoner' or 'agent_1'."
            )
        if not isinstance(self.system_prompt, str):
            raise TypeError(
                f"AgentProfile.system_prompt for {self.role!r} must be a string, "
                f"got {type(self.system_prompt).__name__}."
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentProfile:
        """Build a profile from a mapping.

        Accepts the field names above and the reference implementation's names
        (``prompt`` for ``system_prompt``, ``with_answer`` for ``graded``).
        """
        known = {"role", "system_prompt", "prompt", "graded", "with_answer", "metadata"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(
                f"Unknown profile field(s) {sorted(unknown)} in {dict(data)!r}; "
                f"allowed: {sorted(known)}. Put free-form data under 'metadata'."
            )
        if "role" not in data:
            raise ValueError(f"A profile needs a 'role'; got {dict(data)!r}.")
        return cls(
            role=data["role"],
            system_prompt=data.get("system_prompt", data.get("prompt", "")),
            graded=bool(data.get("graded", data.get("with_answer", False))),
            metadata=dict(data.get("metadata", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        """The profile as a JSON-friendly dict (inverse of :meth:`from_dict`)."""
        return {
            "role": self.role,
            "system_prompt": self.system_prompt,
            "graded": self.graded,
            "metadata": dict(self.metadata),
        }


def as_profiles(profiles: Iterable[AgentProfile | Mapping[str, Any]]) -> tuple[AgentProfile, ...]:
    """Normalise profiles given as objects or dicts, checking roles are unique and non-empty."""
    result = tuple(
        p if isinstance(p, AgentProfile) else AgentProfile.from_dict(p) for p in profiles
    )
    if not result:
        raise ValueError("A team needs at least one agent profile; got none.")
    roles = [p.role for p in result]
    duplicates = sorted({r for r in roles if roles.count(r) > 1})
    if duplicates:
        raise ValueError(
            f"Agent roles must be unique; {duplicates} appear more than once in {roles}."
        )
    return result


def named_team(
    profiles: str | Iterable[AgentProfile | Mapping[str, Any]],
    teams: Mapping[str, Any],
    family: str,
) -> Any:
    """A task family's built-in team by name (``"dual"``), or ``profiles`` as given."""
    if not isinstance(profiles, str):
        return profiles
    if profiles not in teams:
        raise ValueError(
            f"Unknown {family} team {profiles!r}; use one of {sorted(teams)} or a list of profiles."
        )
    return teams[profiles]


def check_graded(profiles: Mapping[str, AgentProfile], family: str, graded_means: str) -> None:
    """Refuse a team without a graded agent (nothing would be scored)."""
    if not any(p.graded for p in profiles.values()):
        raise ValueError(
            f"A {family} team needs at least one graded agent (graded=True, {graded_means}); "
            f"none of {list(profiles)} is graded."
        )
