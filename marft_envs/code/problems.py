"""Programming problems with hidden unit tests, and a dataset of them (what every code data
source yields: :mod:`marft_envs.code.data` loads MBPP and HumanEval files,
:mod:`marft_envs.code.generator` makes problems from seeds)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from marft_envs.core.data import held_out_rows
from marft_envs.sandbox.runner import UnitTests

__all__ = ["CodeDataError", "CodeDataset", "CodeProblem"]


@dataclass(frozen=True)
class CodeProblem:
    """One programming problem with hidden unit tests.

    Attributes:
        prompt: The task as shown to the agents (text, possibly with a code signature or example).
        tests: Test snippets (usually one ``assert`` each); every one must pass for reward 1.
        setup: Code the tests run first (imports, helpers).
        preamble: Code put before the agent's program (MBPP test imports, HumanEval's prompt with
            its helper functions), so a program may rely on what the task statement provides.
        reference: A complete reference solution (``preamble`` is put before it too), if known.
        entry_point: The function under test, if the source names it.
        id: A stable identifier (``mbpp-2``, ``HumanEval/0``, ``gen-1-17``).
    """

    prompt: str
    tests: tuple[str, ...]
    setup: str = ""
    preamble: str = ""
    reference: str | None = None
    entry_point: str | None = None
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(
                f"CodeProblem.prompt must be a non-empty string, got {self.prompt!r:.80}."
            )
        if (
            isinstance(self.tests, str)
            or not self.tests
            or not all(isinstance(t, str) and t.strip() for t in self.tests)
        ):
            raise ValueError(
                f"CodeProblem.tests must be a non-empty sequence of code strings, got {self.tests!r:.80}."
            )
        object.__setattr__(self, "tests", tuple(self.tests))

    @property
    def unit_tests(self) -> UnitTests:
        """The tests in the sandbox's form."""
        return UnitTests(self.tests, self.setup, self.entry_point)

    def program(self, code: str) -> str:
        """The program that is run for an agent's ``code``: the preamble, then the code."""
        return f"{self.preamble}\n\n{code}" if self.preamble else code


class CodeDataError(ValueError):
    """A malformed or invalid row; ``source``, ``location`` (``"row 3"``) and ``field`` say where."""

    def __init__(self, source: str, location: str | None, field: str | None, message: str) -> None:
        where = ", ".join(p for p in (source, location, f"field {field!r}" if field else None) if p)
        super().__init__(f"{where}: {message}")
        self.source, self.location, self.field = source, location, field


class CodeDataset(Sequence[CodeProblem]):
    """An immutable, indexable collection of :class:`CodeProblem`.

    Args:
        problems: The problems.
        name: Where they came from (``"builtin"``, a file stem).
        split: ``"train"``, ``"test"``, ... or ``None``.
    """

    def __init__(
        self, problems: Iterable[CodeProblem], *, name: str = "custom", split: str | None = None
    ) -> None:
        self._problems = tuple(problems)
        for i, item in enumerate(self._problems):
            if not isinstance(item, CodeProblem):
                raise TypeError(
                    f"CodeDataset item {i} is a {type(item).__name__}, expected CodeProblem."
                )
        self.name = name
        self.split = split

    def __len__(self) -> int:
        return len(self._problems)

    @overload
    def __getitem__(self, index: int) -> CodeProblem: ...

    @overload
    def __getitem__(self, index: slice) -> CodeDataset: ...

    def __getitem__(self, index: int | slice) -> CodeProblem | CodeDataset:
        if isinstance(index, slice):
            return CodeDataset(self._problems[index], name=self.name, split=self.split)
        return self._problems[index]

    def __repr__(self) -> str:
        return f"CodeDataset(name={self.name!r}, split={self.split!r}, size={len(self)})"

    def train_test_split(
        self, test_size: float | int, *, seed: int
    ) -> tuple[CodeDataset, CodeDataset]:
        """Split into ``(train, test)`` with no task text on both sides (see
        :func:`~marft_envs.core.data.held_out_rows`); each side keeps the original order."""
        test_rows = held_out_rows([p.prompt for p in self._problems], test_size, seed=seed)
        train = [p for i, p in enumerate(self._problems) if i not in test_rows]
        test = [p for i, p in enumerate(self._problems) if i in test_rows]
        return CodeDataset(train, name=self.name, split="train"), CodeDataset(
            test, name=self.name, split="test"
        )

    def sample(self, np_random: np.random.Generator) -> CodeProblem:
        """Draw one problem uniformly with the caller's generator (e.g. the env's ``np_random``)."""
        if not self._problems:
            raise ValueError(f"Cannot sample from the empty dataset {self.name!r}.")
        return self._problems[int(np_random.integers(len(self._problems)))]


# --- rows -> problems ----------------------------------------------------------------------------
