"""Train/test splits of procedurally generated tasks, disjoint by construction.

A generated task instance is written as a canonical text (its *key*: a puzzle grid, a problem
statement). Whether it belongs to the held-out split is decided by a hash of that text, never by
the seed that drew it, so the splits stay disjoint whatever seeds, sizes or difficulty a run asks
for: a training env rejects every held-out instance it draws, and a test env keeps only those.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TypeVar

import numpy as np

__all__ = ["SPLITS", "check_split", "draw_in_split", "in_test_split"]

#: Names of the two splits of a procedural task family.
SPLITS = ("train", "test")

T = TypeVar("T")


def in_test_split(key: str, every: int = 10) -> bool:
    """Whether the instance written as ``key`` is held out (about one in ``every``)."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % every == 0


def check_split(split: str, family: str) -> str:
    """``split`` if it names a split, else a ValueError that says which ones exist."""
    if split not in SPLITS:
        raise ValueError(
            f"{family} tasks are generated in splits {list(SPLITS)}, not {split!r}; pass "
            f"split='train' to train and split='test' for held-out evaluation."
        )
    return split


def draw_in_split(
    generate: Callable[[np.random.Generator], T],
    key: Callable[[T], str],
    split: str,
    rng: np.random.Generator,
    *,
    max_draws: int = 10_000,
) -> T:
    """Draw instances with ``generate(rng)`` until one belongs to ``split``.

    Raises:
        RuntimeError: No instance of the split came up in ``max_draws`` draws (a generator whose
            settings allow too few distinct instances, e.g. a tiny grid).
    """
    held_out = split == "test"
    for _ in range(max_draws):
        instance = generate(rng)
        if in_test_split(key(instance)) == held_out:
            return instance
    raise RuntimeError(
        f"No {split!r} instance in {max_draws} draws: these generator settings allow too few "
        f"distinct instances; make the task larger or harder."
    )
