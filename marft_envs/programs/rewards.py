"""An agent program's return value as the team reward: a finite float, or named parts whose
weighted sum is one; anything else is the program's error (its episode fails), never a paid
value or a traceback."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from marft_envs.wire.checks import finite_number

__all__ = ["MAX_REWARD_PARTS", "combine_reward", "finite_number"]


#: Named reward parts a program may return, by default (``max_reward_parts``).
MAX_REWARD_PARTS = 64


def combine_reward(
    value: Any, weights: Mapping[str, float], max_parts: int = MAX_REWARD_PARTS
) -> tuple[float, dict[str, float]]:
    """The team reward and its named parts from what a program returned.

    A number is the team reward itself (parts: ``{}``). A mapping of named parts gives
    ``Σ weights.get(name, 1) · part``, which must be a finite float too.

    Raises:
        TypeError / ValueError: Anything else: a part that is not a finite float (huge integers
            included), more than ``max_parts`` parts, or a weighted sum that overflows.
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return _finite_float(value, "the program returned reward"), {}
    if isinstance(value, Mapping) and value:
        if len(value) > max_parts:
            raise ValueError(
                f"the program returned {len(value)} reward parts, more than max_reward_parts="
                f"{max_parts}; return fewer named parts (each becomes a metric), or raise "
                f"max_reward_parts where the program is registered."
            )
        parts: dict[str, float] = {}
        for name, part in value.items():
            if not isinstance(name, str):
                raise TypeError(f"reward part names must be strings, got {name!r:.80}.")
            if isinstance(part, bool) or not isinstance(part, numbers.Real):
                raise TypeError(f"reward part {name!r} must be a number, got {part!r:.80}.")
            parts[name] = _finite_float(part, f"reward part {name!r} is")
        try:
            total = math.fsum(weights.get(name, 1.0) * part for name, part in parts.items())
        except OverflowError:
            total = math.inf
        if not math.isfinite(total):
            raise ValueError(
                f"the weighted sum of the reward parts {sorted(parts)} is {total}; return parts "
                f"whose weighted sum is a finite number."
            )
        return total, parts
    raise TypeError(
        f"the program returned {value!r:.80}; return the episode's reward: a number, or a mapping "
        f"of named parts such as {{'success': 1.0, 'cost': -0.15}}."
    )


def _finite_float(value: numbers.Real, what: str) -> float:
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(
            f"{what} {str(value)[:40]}, which is not a finite float; return finite numbers."
        )
    return number
