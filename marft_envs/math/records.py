"""Math problem records: :class:`MathProblem`, :class:`MathDataset` and :class:`MathDataError`.

Turning rows of a file into records is :mod:`marft_envs.math.rows`; reading files is
:mod:`marft_envs.math.loaders`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from marft_envs.core.data import held_out_rows

__all__ = ["MathDataError", "MathDataset", "MathProblem", "SkippedRow"]


@dataclass(frozen=True)
class MathProblem:
    """One math problem with its gold answer.

    Attributes:
        problem: The problem statement (LaTeX allowed), shown to the agents.
        answer: The gold final answer as a string, in the MATH convention (``"\\frac{3}{4}"``,
            ``"(2,-3)"``, ``"2, 3"``); graded against the agent's last ``\\boxed{}``.
        solution: A worked solution ending in ``\\boxed{answer}`` (MATH, generator) or the worked
            text (GSM8K), if known. Used for supervised warm-up, never shown to graded agents.
        level: Difficulty (MATH levels 1-5), if known.
        subject: Subject (MATH) or generator family name, if known.
        id: A stable identifier (``unique_id`` of MATH, ``idx`` of GSM8K, ``gen-<seed>-<i>``).
    """

    problem: str
    answer: str
    solution: str | None = None
    level: int | None = None
    subject: str | None = None
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.problem, str) or not self.problem.strip():
            raise ValueError(
                f"MathProblem.problem must be a non-empty string, got {self.problem!r}."
            )
        if not isinstance(self.answer, str) or not self.answer.strip():
            raise ValueError(f"MathProblem.answer must be a non-empty string, got {self.answer!r}.")
        if self.level is not None and (
            isinstance(self.level, bool) or not isinstance(self.level, int) or self.level < 1
        ):
            raise ValueError(
                f"MathProblem.level must be a positive int or None, got {self.level!r}."
            )


class MathDataError(ValueError):
    """A malformed row or file; ``source``, ``location`` (``"line 3"``) and ``field`` say where.

    ``reason`` is the message without the location.
    """

    def __init__(self, source: str, location: str | None, field: str | None, message: str) -> None:
        where = ", ".join(p for p in (source, location, f"field {field!r}" if field else None) if p)
        super().__init__(f"{where}: {message}")
        self.source, self.location, self.field, self.reason = source, location, field, message


@dataclass(frozen=True)
class SkippedRow:
    """A row a loader dropped with ``on_invalid="skip"``: where it was and why."""

    location: str
    reason: str


class MathDataset(Sequence[MathProblem]):
    """An immutable, indexable collection of :class:`MathProblem`.

    Args:
        problems: The problems.
        name: Where they came from (``"builtin"``, a file stem, a Hub name).
        split: ``"train"``, ``"test"``, ... or ``None``.
        skipped: Rows of the source that a loader dropped (``on_invalid="skip"``), kept so the
            dataset can say how much of its source it holds (:attr:`rows_read`).
    """

    def __init__(
        self,
        problems: Iterable[MathProblem],
        *,
        name: str = "custom",
        split: str | None = None,
        skipped: Iterable[SkippedRow] = (),
    ) -> None:
        self._problems = tuple(problems)
        self.skipped: tuple[SkippedRow, ...] = tuple(skipped)
        for i, item in enumerate(self._problems):
            if not isinstance(item, MathProblem):
                raise TypeError(
                    f"MathDataset item {i} is a {type(item).__name__}, expected MathProblem."
                )
        self.name = name
        self.split = split

    def __len__(self) -> int:
        return len(self._problems)

    @property
    def rows_read(self) -> int:
        """Rows of the source: the problems kept plus the rows skipped as invalid."""
        return len(self._problems) + len(self.skipped)

    @overload
    def __getitem__(self, index: int) -> MathProblem: ...

    @overload
    def __getitem__(self, index: slice) -> MathDataset: ...

    def __getitem__(self, index: int | slice) -> MathProblem | MathDataset:
        if isinstance(index, slice):
            return MathDataset(
                self._problems[index], name=self.name, split=self.split, skipped=self.skipped
            )
        return self._problems[index]

    def __repr__(self) -> str:
        levels = sorted({p.level for p in self._problems if p.level is not None})
        skipped = f", skipped={len(self.skipped)}" if self.skipped else ""
        return f"MathDataset(name={self.name!r}, split={self.split!r}, size={len(self)}, levels={levels}{skipped})"

    def sample(self, np_random: np.random.Generator) -> MathProblem:
        """Draw one problem uniformly with the caller's generator (e.g. the env's ``np_random``)."""
        if not self._problems:
            raise ValueError(f"Cannot sample from the empty dataset {self.name!r}.")
        return self._problems[int(np_random.integers(len(self._problems)))]

    def filter(
        self,
        *,
        levels: Iterable[int] | None = None,
        subjects: Iterable[str] | None = None,
        where: Any = None,
    ) -> MathDataset:
        """Keep the problems whose level is in ``levels``, subject in ``subjects`` and ``where(p)``.

        ``None`` keeps everything for that criterion; problems without a level (or subject) are
        dropped when ``levels`` (or ``subjects``) is given.
        """
        level_set = None if levels is None else set(levels)
        subject_set = None if subjects is None else set(subjects)
        kept = [
            p
            for p in self._problems
            if (level_set is None or p.level in level_set)
            and (subject_set is None or p.subject in subject_set)
            and (where is None or where(p))
        ]
        return MathDataset(kept, name=self.name, split=self.split, skipped=self.skipped)

    def train_test_split(
        self, test_size: float | int, *, seed: int
    ) -> tuple[MathDataset, MathDataset]:
        """Split into ``(train, test)`` with no problem text on both sides.

        Problems sharing the same text form one group that goes wholly to one side, so ``test_size``
        counts groups (a fraction in (0, 1) of them, or an absolute number). Each side keeps the
        original order.

        Args:
            test_size: Fraction (``0 < test_size < 1``) or number (``1 <= test_size < groups``).
            seed: Seed of the shuffle; the same seed gives the same split.
        """
        test_rows = held_out_rows([p.problem for p in self._problems], test_size, seed=seed)
        train = [p for i, p in enumerate(self._problems) if i not in test_rows]
        test = [p for i, p in enumerate(self._problems) if i in test_rows]
        return MathDataset(train, name=self.name, split="train"), MathDataset(
            test, name=self.name, split="test"
        )
