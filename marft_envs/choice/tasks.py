"""The tasks of the choice team, as pure functions: drawing a task, reading the planner's choice,
writing the problem that choice makes and grading the solver (no env, no policy).

A task is a request in words, ``Use Times. Compute 7 ? 3.``, and a tail the solver adds, `` + 4``:
the operation named by the word fills the ``?``. The planner answers with text whose first operation symbol (``+``, ``-``,
``\\times``) is its choice; the problem the solver gets is the request with that symbol in place of
the ``?``, then the tail. The three operations always give three different values (``a > b >= 2``, so
``a + b``, ``a - b`` and ``a \\times b`` differ, and the same tail follows each), so a solver can be
right after a wrong choice only by an arithmetic slip that lands on the right value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = [
    "OPERATIONS",
    "SYMBOLS",
    "WORDS",
    "ChoiceTask",
    "draw_task",
    "parse_choice",
    "solver_problem",
    "task_value",
]

#: The planner's options, by the word a request names them with.
OPERATIONS: tuple[str, ...] = ("plus", "minus", "times")
#: How each option is written in a problem (the built-in model's LaTeX for a product).
SYMBOLS: dict[str, str] = {"plus": "+", "minus": "-", "times": "\\times"}
#: How a request names each option. Capitalised, the untuned built-in model writes each option's
#: symbol with some probability for each word (lower case, it almost never writes \times for "times"
#: there), so every option can be explored from the start.
WORDS: dict[str, str] = {"plus": "Plus", "minus": "Minus", "times": "Times"}

# The first operation symbol of a text; "*" and the Unicode sign also mean a product.
_SYMBOL = re.compile(r"\\times|\u00d7|\*|\+|-")
_READ = {"\\times": "times", "\u00d7": "times", "*": "times", "+": "plus", "-": "minus"}


@dataclass(frozen=True)
class ChoiceTask:
    """One request: ``a ? b`` followed by the ``tail`` operations, ``?`` being ``operation``.

    Attributes:
        a: First operand (3-9).
        b: Second operand (2 to ``a - 1``).
        operation: The right option, one of :data:`OPERATIONS`.
        tail: The operations after ``a ? b``: ``(symbol, operand)`` pairs, ``+`` or ``-``.
    """

    a: int
    b: int
    operation: str
    tail: tuple[tuple[str, int], ...] = ()

    @property
    def request(self) -> str:
        """What the planner reads: the operation in words and the pair it joins (the tail is
        the solver's work; the choice does not depend on it)."""
        return f"Use {WORDS[self.operation]}. Compute {self.a} ? {self.b}."

    @property
    def key(self) -> str:
        """The task's canonical text (it decides the split)."""
        return f"{self.operation}: {self.a} ? {self.b}{_tail_text(self.tail)}"

    @property
    def answer(self) -> int:
        """The value of the request with the right operation (the gold answer)."""
        return task_value(self, self.operation)


def _tail_text(tail: tuple[tuple[str, int], ...]) -> str:
    return "".join(f" {symbol} {c}" for symbol, c in tail)


def task_value(task: ChoiceTask, operation: str) -> int:
    """The problem's value when ``operation`` fills the ``?`` (left to right: the first
    operation comes first, so the order of operations agrees)."""
    a, b = task.a, task.b
    value = {"plus": a + b, "minus": a - b, "times": a * b}[operation]
    for symbol, c in task.tail:
        value = value + c if symbol == "+" else value - c
    return value


def draw_task(rng: np.random.Generator, tail_length: int = 1) -> ChoiceTask:
    """A task drawn with ``rng``: the operation uniform over :data:`OPERATIONS`, ``3 <= a <= 9``,
    ``2 <= b < a``, then ``tail_length`` single-digit additions or subtractions that keep the
    right value non-negative (as the built-in ``digits`` problems do)."""
    operation = OPERATIONS[int(rng.integers(len(OPERATIONS)))]
    a = int(rng.integers(3, 10))
    b = int(rng.integers(2, a))
    task = ChoiceTask(a, b, operation)
    tail: list[tuple[str, int]] = []
    for _ in range(tail_length):
        value = task_value(ChoiceTask(a, b, operation, tuple(tail)), operation)
        c = int(rng.integers(1, 10))
        symbol = "+" if rng.random() < 0.5 or value < c else "-"
        tail.append((symbol, c))
    return ChoiceTask(task.a, task.b, operation, tuple(tail))


def parse_choice(text: str) -> str | None:
    """The option the planner's text chose: its first operation symbol, as a word of
    :data:`OPERATIONS` (``*`` and ``×`` read as ``times``); None when it writes none."""
    match = _SYMBOL.search(text)
    return _READ[match.group(0)] if match else None


def solver_problem(task: ChoiceTask, choice: str | None) -> str:
    """The problem the solver gets: the request with the chosen symbol for the ``?`` (the ``?``
    stays when the planner chose nothing)."""
    symbol = SYMBOLS[choice] if choice is not None else "?"
    return f"Compute {task.a} {symbol} {task.b}{_tail_text(task.tail)}."
