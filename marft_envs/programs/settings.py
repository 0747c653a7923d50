"""The settings of a program env: one documented field each, checked once, with what to fix.

``register_program(..., max_calls=8, on_error="reward")`` and ``ProgramEnv(..., max_calls=8)``
take them as flat keywords (:meth:`ProgramSettings.from_keywords`); the request bounds are one
:class:`~marft_envs.wire.RequestLimits` (``limits``), which the flat keywords
``max_request_bytes``, ``max_messages`` and ``max_concurrent_calls`` build.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marft_envs.programs.rewards import MAX_REWARD_PARTS
from marft_envs.wire.checks import finite_number
from marft_envs.wire.protocol import RequestLimits
from marft_envs.wire.tools import TOOL_PROMPTS, ToolParser, resolve_parser

__all__ = ["LIMIT_KEYWORDS", "ProgramSettings"]

#: The flat keywords that spell the fields of :class:`~marft_envs.wire.RequestLimits`.
LIMIT_KEYWORDS = tuple(f.name for f in dataclasses.fields(RequestLimits))


@dataclass
class ProgramSettings:
    """How a :class:`~marft_envs.programs.ProgramEnv` runs, bounds and pays its program's episodes."""

    credit: str = "team"
    """Credit rule for the program's reward (``"team"``: every agent that acted shares it)."""
    max_calls: int = 32
    """Model calls per episode before it is truncated (and fails)."""
    episode_timeout: float = 60.0
    """Seconds the program may run per episode: a wall clock from the episode's start that stops
    only while one of its calls waits for the model, kept whatever the env is doing (so hung
    episodes time out together, not one after another); past it the episode fails (``Timeout``)."""
    max_episode_seconds: float | None = 3600.0
    """Wall-clock seconds of one episode, model time included, checked at each call; past it the
    episode fails (``Timeout``). None: no limit."""
    on_error: str = "drop"
    """What a failed episode (the program raised, timed out, returned no finite reward, passed a
    bound, or used up ``max_calls``) is worth to training. ``"drop"``: it is left out of the
    update and counted, so failing can never pay more than finishing. ``"reward"``: it is paid
    ``error_reward`` and trained on (a warning says when that exceeds the lowest reward a
    finished episode was paid)."""
    error_reward: float = 0.0
    """What a failed episode is paid (under ``"drop"``: only what held-out metrics such as
    ``eval/reward_mean`` count it as)."""
    max_error_share: float = 0.5
    """Share of one rollout's episodes that may fail before the run stops with the first
    failure's traceback (1 never stops)."""
    reward_weights: Mapping[str, float] = field(default_factory=dict)
    """Weight of each named reward part (default 1 each)."""
    max_reward_parts: int = MAX_REWARD_PARTS
    """Named reward parts a program may return (each becomes a metric)."""
    limits: RequestLimits = field(default_factory=RequestLimits)
    """Bounds on one request and on the calls of one episode waiting at once; a request past one
    is refused (HTTP 413, 400, 429) and fails the episode."""
    max_prompt_tokens: int | None = None
    """Tokens of one rendered prompt; a longer call is refused before it is generated (HTTP 400)
    and fails the episode (``PromptTooLong``). None: only the model's context less the agent's
    reply budget bounds it (docs/programs.md, "Bounds")."""
    isolation: str = "thread"
    """``"thread"``: the program runs in a thread of this process. ``"process"``: in a child
    process and process group of its own, killed with its children at the episode's end, so that
    neither ``os._exit``, a crash nor a process it leaves behind can end or outlive the trainer
    (POSIX only; docs/programs.md)."""
    test_size: float = 0.1
    """Held-out share (or count) of ``tasks`` when ``test_tasks`` is not given."""
    split_seed: int = 0
    """Seed of that split."""
    transport: str = "inprocess"
    """``"inprocess"``: the program gets a :class:`~marft_envs.programs.ProgramClient`;
    ``"http"``: it gets ``openai.OpenAI`` on the episode's own URL of a local OpenAI-compatible
    endpoint (:mod:`marft_envs.programs.server`), for frameworks."""
    tool_parser: str | ToolParser = "hermes"
    """How a reply to a call with ``tools`` becomes ``tool_calls``: a name in
    :data:`~marft_envs.wire.tools.TOOL_PARSERS` or a function."""
    tool_prompt: str | None = None
    """None: tools reach the policy's chat template, which must support them. ``"hermes"``: the
    env describes them in the system prompt and writes tool calls and results as text, for models
    whose template has no tool support. An untuned small model rarely uses that format:
    SmolLM2-135M-Instruct wrote no well-formed call on 60 held-out tasks, greedy or at T = 1,
    until the program's messages held one example call (``benchmarks/tool_calls/RESULTS.md``)."""
    parser: ToolParser = field(init=False, repr=False)
    """``tool_parser`` as a function (derived)."""

    def __post_init__(self) -> None:
        if not (finite_number(self.episode_timeout) and self.episode_timeout > 0):
            raise ValueError(
                f"episode_timeout must be a positive, finite number of seconds, got "
                f"{self.episode_timeout!r}."
            )
        for name, value in {"error_reward": self.error_reward, **self.reward_weights}.items():
            if not finite_number(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}.")
        _one_of("transport", self.transport, ("inprocess", "http"))
        if self.on_error not in ("drop", "reward"):
            raise ValueError(
                f"on_error must be 'drop' (failed episodes are left out of the update) or "
                f"'reward' (they are paid error_reward), got {self.on_error!r}."
            )
        _one_of("isolation", self.isolation, ("thread", "process"))
        seconds = self.max_episode_seconds
        if seconds is not None and not (finite_number(seconds) and seconds > 0):
            raise ValueError(
                f"max_episode_seconds must be a positive number of seconds or None, got "
                f"{seconds!r}."
            )
        for name in ("max_reward_parts", "max_prompt_tokens"):
            bound = getattr(self, name)
            if bound is not None and (
                isinstance(bound, bool) or not isinstance(bound, int) or bound < 1
            ):
                raise ValueError(f"{name} must be a positive integer, got {bound!r}.")
        if not isinstance(self.limits, RequestLimits):
            raise TypeError(
                f"limits must be a marft_envs.wire.RequestLimits, got {self.limits!r:.80}."
            )
        if not 0 < self.max_error_share <= 1:
            raise ValueError(f"max_error_share must be in (0, 1], got {self.max_error_share!r}.")
        if self.tool_prompt is not None and self.tool_prompt not in TOOL_PROMPTS:
            raise ValueError(
                f"tool_prompt must be None (the chat template renders tools) or one of "
                f"{sorted(TOOL_PROMPTS)}, got {self.tool_prompt!r}."
            )
        self.parser = resolve_parser(self.tool_parser)
        self.reward_weights = {str(k): float(v) for k, v in self.reward_weights.items()}
        self.episode_timeout = float(self.episode_timeout)
        self.error_reward = float(self.error_reward)
        self.max_error_share = float(self.max_error_share)

    @classmethod
    def keywords(cls) -> dict[str, Any]:
        """Every flat keyword :meth:`from_keywords` takes, with its default (``dataclasses.MISSING``
        for a field built by a factory): the fields, then the request bounds."""
        out = {f.name: f.default for f in dataclasses.fields(cls) if f.init}
        out.update({f.name: f.default for f in dataclasses.fields(RequestLimits)})
        return out

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> ProgramSettings:
        """The settings from flat keywords, as ``register_program`` and ``ProgramEnv`` take
        them: each field by its name, the request bounds also by the names of their
        :class:`~marft_envs.wire.RequestLimits` fields (which then override ``limits``).

        Raises:
            TypeError: A keyword that names no setting (the message suggests the nearest).
        """
        known = list(cls.keywords())
        unknown = sorted(set(keywords) - set(known))
        if unknown:
            near = {n: difflib.get_close_matches(n, known, 1) for n in unknown}
            hints = "".join(f" ({n!r}: did you mean {m[0]!r}?)" for n, m in near.items() if m)
            raise TypeError(
                f"unknown program setting(s) {unknown}{hints}; the settings are {sorted(known)}."
            )
        given = {k: v for k, v in keywords.items() if k not in LIMIT_KEYWORDS}
        bounds = {k: v for k, v in keywords.items() if k in LIMIT_KEYWORDS}
        if given.get("reward_weights") is None:
            given.pop("reward_weights", None)
        if bounds:
            base = given.get("limits") or RequestLimits()
            given["limits"] = dataclasses.replace(base, **bounds)
        return cls(**given)


def _one_of(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        quoted = " or ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be {quoted}, got {value!r}.")
