"""How a program's episode ends: paid what the program returned, or failed.

An episode fails when the program raises, runs out of ``episode_timeout``, returns no finite
reward (or a mapping of them), passes a bound (a refused request, ``max_prompt_tokens``,
``max_episode_seconds``) or uses up ``max_calls``. A failed episode never pays more than a finished
one: under ``on_error="drop"`` (the default) it is left out of the update and counted; under
``"reward"`` it is paid ``error_reward``, with a warning, once per program and
``error_reward`` in a process (not once per env copy), that pays more than a finished episode was
paid (docs/programs.md, "Failures").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from marft_envs.core.env import Transition
from marft_envs.programs.client import CallRecord
from marft_envs.programs.rewards import combine_reward
from marft_envs.programs.settings import ProgramSettings

__all__ = ["FailureRule"]

logger = logging.getLogger(__name__)

#: The (program, error_reward) pairs already warned about: every env copy of one program (the
#: rollout's and the evaluation's, in one process) shares the one warning.
_WARNED: set[Any] = set()


class FailureRule:
    """The end of one env copy's episodes under its :class:`ProgramSettings`.

    Each method returns the episode's last :class:`~marft_envs.core.env.Transition` (its reward
    and ``info``); ``counts`` is the episode's usage (``calls``, ``prompt_tokens``,
    ``completion_tokens`` per agent), kept in every ending's ``info``.

    Args:
        settings: The env's settings.
        family: What the env copies of one run share (their program): the warning that failing
            pays more is given once per family and ``error_reward``; None: once per rule.
    """

    def __init__(self, settings: ProgramSettings, family: Any = None) -> None:
        self.settings = settings
        self._lowest_finished: float | None = None
        self._family: Any = id(self) if family is None else family
        try:
            hash(self._family)
        except TypeError:  # an unhashable callable: its identity
            self._family = id(family)

    def finished(
        self, value: Any, counts: Mapping[str, Any], call: CallRecord | None
    ) -> Transition:
        """The program returned ``value``: its reward, or a failure when it is none."""
        try:
            reward, parts = combine_reward(
                value, self.settings.reward_weights, self.settings.max_reward_parts
            )
        except (TypeError, ValueError) as err:
            return self.failed(type(err).__name__, str(err), "", counts, call)
        self._note_finished(reward)
        info: dict[str, Any] = {**counts, "reward_parts": parts}
        if "success" in parts:
            info["correct"] = parts["success"] > 0
        return Transition(reward=reward, terminated=True, info=info)

    def timed_out(self, counts: Mapping[str, Any], call: CallRecord | None) -> Transition:
        """The program neither called nor returned within ``episode_timeout``."""
        return self.failed(
            "Timeout",
            f"the program neither called a model nor returned within episode_timeout="
            f"{self.settings.episode_timeout:g} s",
            "",
            counts,
            call,
        )

    def failed(
        self,
        kind: str,
        message: str,
        trace: str,
        counts: Mapping[str, Any],
        call: CallRecord | None,
    ) -> Transition:
        """A failed episode: ``info["program_error"]`` names the error and the call it followed."""
        error = {
            "type": kind,
            "message": message,
            "agent": call.agent if call else None,
            "call": call.index if call else None,
            "traceback": trace,
        }
        return Transition(
            reward=self.settings.error_reward,
            terminated=True,
            info={**counts, "program_error": error, **self.drop()},
        )

    def truncated(self, counts: Mapping[str, Any]) -> Transition:
        """The episode used up ``max_calls`` calls without an end."""
        return Transition(
            reward=self.settings.error_reward,
            info={**counts, "program_failure": "max_calls", **self.drop()},
        )

    def drop(self) -> dict[str, Any]:
        """``{"drop": True}`` under ``on_error="drop"``: trainers leave the episode out."""
        return {"drop": True} if self.settings.on_error == "drop" else {}

    def broken_bound(
        self, refusals: list[tuple[str, str]], prompt_tokens: int, elapsed: float
    ) -> tuple[str, str] | None:
        """The first bound the episode passed, as ``(kind, message)``; None while within them.

        Args:
            refusals: The requests refused so far, as ``(kind, message)``.
            prompt_tokens: Tokens of the last call's rendered prompt.
            elapsed: Seconds since the episode began, model time included.
        """
        if refusals:
            return refusals[0]
        limit = self.settings.max_prompt_tokens
        if limit is not None and prompt_tokens > limit:
            return (
                "PromptTooLong",
                f"a call's rendered prompt has {prompt_tokens} tokens, more than "
                f"max_prompt_tokens={limit}; send shorter messages, or raise "
                f"max_prompt_tokens where the program is registered.",
            )
        seconds = self.settings.max_episode_seconds
        if seconds is not None and elapsed > seconds:
            return (
                "Timeout",
                f"the episode ran {elapsed:.0f} s, model time included, more than "
                f"max_episode_seconds={seconds:g}",
            )
        return None

    def _note_finished(self, reward: float) -> None:
        """Warn once when a failed episode would be paid more than a finished one was."""
        lowest = self._lowest_finished
        self._lowest_finished = reward if lowest is None else min(lowest, reward)
        error_reward = self.settings.error_reward
        key = (self._family, error_reward)
        if (
            self.settings.on_error == "reward"
            and error_reward > self._lowest_finished
            and key not in _WARNED
        ):
            _WARNED.add(key)
            logger.warning(
                "error_reward=%g exceeds the reward of a finished episode (%g): failing pays more "
                "than finishing, so training will teach the team to fail. Use on_error='drop' (the "
                "default) or a lower error_reward.",
                error_reward,
                self._lowest_finished,
            )
