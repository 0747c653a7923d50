"""Math problem records: :class:`MathProblem`, :class:`MathDataset`, and row → record conversion.

Shared by the file loaders (:mod:`marft_envs.math.loaders`) and :func:`marft_envs.math.data.load_dataset`:
field-name resolution, answer and level conversion, and load-time validation with errors that name
the source, the row and the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal, overload

import numpy as np

__all__ = ["GSM8K_FIELDS", "MATH_FIELDS", "MathDataError", "MathDataset", "MathProblem", "last_boxed"]



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
            raise ValueError(f"MathProblem.problem must be a non-empty string, got {self.problem!r}.")
        if not isinstance(self.answer, str) or not self.answer.strip():
            raise ValueError(f"MathProblem.answer must be a non-empty string, got {self.answer!r}.")
        if self.level is not None and (isinstance(self.level, bool) or not isinstance(self.level, int) or self.level < 1):
            raise ValueError(f"MathProblem.level must be a positive int or None, got {self.level!r}.")


class MathDataError(ValueError):
    """A malformed row or file; ``source``, ``location`` (``"line 3"``) and ``field`` say where."""

    def __init__(self, source: str, location: str | None, field: str | None, message: str) -> None:
        where = ", ".join(p for p in (source, location, f"field {field!r}" if field else None) if p)
        super().__init__(f"{where}: {message}")
        self.source, self.location, self.field = source, location, field


class MathDataset(Sequence[MathProblem]):
    """An immutable, indexable collection of :class:`MathProblem`.

    Args:
        problems: The problems.
        name: Where they came from (``"builtin"``, a file stem, a Hub name).
        split: ``"train"``, ``"test"``, ... or ``None``.
    """

    def __init__(self, problems: Iterable[MathProblem], *, name: str = "custom", split: str | None = None) -> None:
        self._problems = tuple(problems)
        for i, item in enumerate(self._problems):
            if not isinstance(item, MathProblem):
                raise TypeError(f"MathDataset item {i} is a {type(item).__name__}, expected MathProblem.")
        self.name = name
        self.split = split

    def __len__(self) -> int:
        return len(self._problems)

    @overload
    def __getitem__(self, index: int) -> MathProblem: ...

    @overload
    def __getitem__(self, index: slice) -> MathDataset: ...

    def __getitem__(self, index: int | slice) -> MathProblem | MathDataset:
        if isinstance(index, slice):
            return MathDataset(self._problems[index], name=self.name, split=self.split)
        return self._problems[index]

    def __repr__(self) -> str:
        levels = sorted({p.level for p in self._problems if p.level is not None})
        return f"MathDataset(name={self.name!r}, split={self.split!r}, size={len(self)}, levels={levels})"

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
        return MathDataset(kept, name=self.name, split=self.split)

    def train_test_split(self, test_size: float | int, *, seed: int) -> tuple[MathDataset, MathDataset]:
        """Split into ``(train, test)`` with no problem text on both sides.

        Problems sharing the same text form one group that goes wholly to one side, so ``test_size``
        counts groups (a fraction in (0, 1) of them, or an absolute number). Each side keeps the
        original order.

        Args:
            test_size: Fraction (``0 < test_size < 1``) or number (``1 <= test_size < groups``).
            seed: Seed of the shuffle; the same seed gives the same split.
        """
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(self._problems):
            groups.setdefault(p.problem, []).append(i)
        n = len(groups)
        if isinstance(test_size, float) and 0.0 < test_size < 1.0:
            n_test = min(max(1, round(test_size * n)), n - 1)
        elif isinstance(test_size, int) and not isinstance(test_size, bool) and 1 <= test_size < n:
            n_test = test_size
        else:
            raise ValueError(
                f"test_size must be a float in (0, 1) or an int in [1, {n - 1}] for {n} distinct "
                f"problems, got {test_size!r}."
            )
        keys = list(groups)
        order = np.random.default_rng(seed).permutation(n)
        test_rows = {i for k in order[:n_test] for i in groups[keys[k]]}
        train = [p for i, p in enumerate(self._problems) if i not in test_rows]
        test = [p for i, p in enumerate(self._problems) if i in test_rows]
        return MathDataset(train, name=self.name, split="train"), MathDataset(test, name=self.name, split="test")


# --- field conversion ---------------------------------------------------------------------------


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    start, depth = starts[-1], 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
    return None


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str) and not value.strip())


def _answer_text(value: Any) -> str:
    """A gold answer as a string; numbers are written exactly, integral floats without ``.0``."""
    if isinstance(value, np.generic):
        # float32 values print their shortest decimal (0.1), not the widened float64 (0.1000000015).
        value = Decimal(str(value)) if isinstance(value, np.floating) else value.item()
    if isinstance(value, bool):
        raise ValueError(f"a boolean answer ({value}) is ambiguous; store it as a string")
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"the answer is {value}, not a number a solver could give")
        value = Decimal(repr(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"the answer is {value}, not a number a solver could give")
        if value == value.to_integral_value():
            return str(int(value))
        return format(value.normalize(), "f")
    if isinstance(value, Fraction):
        return str(value.numerator) if value.denominator == 1 else (
            f"{'-' if value < 0 else ''}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
        )
    raise ValueError(f"cannot use a {type(value).__name__} ({value!r}) as an answer; store it as a string")


_LEVEL = re.compile(r"^\s*(?:level\s*)?(\d+)\s*$", re.IGNORECASE)


def _level(value: Any) -> int | None:
    if _is_missing(value) or (isinstance(value, str) and value.strip().lower() == "level ?"):
        return None  # MATH marks a few problems "Level ?"
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and (m := _LEVEL.match(value)):
        value = int(m.group(1))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"level must be a positive integer or 'Level k', got {value!r}")


@dataclass(frozen=True)
class _Fields:
    """Which row fields hold what; ``None`` means the dataset has no such field."""

    problem: str = "problem"
    answer: str | None = "answer"
    solution: str | None = None
    level: str | None = None
    subject: str | None = None
    id: str | None = None
    answer_format: Literal["plain", "gsm8k"] = "plain"
    optional: frozenset[str] = frozenset()


MATH_FIELDS: dict[str, Any] = {
    "problem_field": "problem",
    "answer_field": "answer",
    "solution_field": "solution",
    "level_field": "level",
    "subject_field": "subject",
    "id_field": "unique_id",
}
"""Field names of the MATH / MATH-500 format (``answer`` may be absent: last ``\\boxed{}`` of ``solution``)."""

GSM8K_FIELDS: dict[str, Any] = {
    "problem_field": "question",
    "answer_field": "answer",
    "id_field": "idx",
    "answer_format": "gsm8k",
}
"""Field names of the GSM8K format (``answer`` is the worked solution ending in ``#### <number>``)."""

# In MATH-style rows only the problem and one of answer / solution must be present.
_MATH_OPTIONAL = frozenset({"answer", "solution", "level", "subject", "unique_id"})

_CALCULATOR = re.compile(r"<<[^<>]*>>")


def _to_problem(row: Any, fields: _Fields, source: str, location: str, default_id: str, seen: set[str]) -> MathProblem:
    if not isinstance(row, Mapping):
        raise MathDataError(source, location, None, f"expected an object with fields, got {type(row).__name__}")

    def get(field: str | None, *, required: bool) -> Any:
        if field is None:
            return None
        if field not in row:
            # Optional fields may be absent from single rows; _build rejects a name no row has.
            if required and field not in fields.optional:
                present = ", ".join(map(repr, list(row)[:12]))
                raise MathDataError(source, location, field, f"missing field (fields present: {present})")
            return None
        seen.add(field)
        return row[field]

    problem = get(fields.problem, required=True)
    if not isinstance(problem, str) or not problem.strip():
        raise MathDataError(source, location, fields.problem, f"the problem must be a non-empty string, got {problem!r}")
    solution = get(fields.solution, required=False)
    if _is_missing(solution):
        solution = None
    elif not isinstance(solution, str):
        raise MathDataError(source, location, fields.solution, f"the solution must be a string, got {solution!r}")
    raw = get(fields.answer, required=fields.solution is None)
    answer_field = fields.answer or fields.solution
    if fields.answer_format == "gsm8k":
        if not isinstance(raw, str) or "####" not in raw:
            raise MathDataError(source, location, answer_field, f"expected a worked solution ending in '#### <answer>', got {raw!r}")
        worked, _, tail = raw.rpartition("####")
        answer = tail.strip().replace(",", "")
        solution = solution or _CALCULATOR.sub("", worked).strip() or None
    elif _is_missing(raw):
        # MATH rows without an ``answer`` field carry it as the solution's last \boxed{}.
        boxed = last_boxed(solution) if solution else None
        if not boxed:
            why = "missing answer" + (" and no \\boxed{} in the solution" if fields.solution else "")
            raise MathDataError(source, location, answer_field, why)
        answer = boxed
    else:
        try:
            answer = _answer_text(raw)
        except ValueError as err:
            raise MathDataError(source, location, answer_field, str(err)) from None
    if not answer:
        raise MathDataError(source, location, answer_field, "the answer is empty")
    try:
        level = _level(get(fields.level, required=False))
    except ValueError as err:
        raise MathDataError(source, location, fields.level, str(err)) from None
    subject = get(fields.subject, required=False)
    ident = get(fields.id, required=False)
    return MathProblem(
        problem=problem,
        answer=answer,
        solution=solution,
        level=level,
        subject=None if _is_missing(subject) else str(subject),
        id=default_id if _is_missing(ident) else str(ident),
    )


def _check_answers(problems: Sequence[MathProblem], locations: Sequence[str], source: str, field: str) -> None:
    from marft_envs.math.grading import check_gold  # lazy: grading pulls in sympy

    for problem, location in zip(problems, locations, strict=True):
        try:
            check_gold(problem.answer)
        except ValueError as err:
            raise MathDataError(source, location, field, f"the gold answer {problem.answer!r} cannot be parsed: {err} (validate=False skips this check)") from None


def _build(
    rows: Iterable[tuple[str, Any]],
    fields: _Fields,
    *,
    source: str,
    name: str,
    split: str | None,
    validate: bool,
) -> MathDataset:
    problems: list[MathProblem] = []
    locations: list[str] = []
    seen: set[str] = set()
    for location, row in rows:
        problems.append(_to_problem(row, fields, source, location, f"{name}-{len(problems)}", seen))
        locations.append(location)
    if not problems:
        raise MathDataError(source, None, None, "no rows found")
    for field in (fields.answer, fields.solution, fields.level, fields.subject, fields.id):
        if field is not None and field not in seen and field not in fields.optional:
            raise MathDataError(source, None, field, "no row has this field; check the field name")
    if validate:
        _check_answers(problems, locations, source, fields.answer or fields.solution or "answer")
    return MathDataset(problems, name=name, split=split)


def _resolve_fields(first_row: Any, given: Mapping[str, Any], source: str, optional: Iterable[str] = ()) -> _Fields:
    """Field names from the caller, or recognised from the first row (MATH or GSM8K format).

    ``given`` holds only the names the caller set; ``answer_field=None`` there means "no answer
    field". Fields named in ``optional`` may be absent from a row.
    """
    given = dict(given)
    optional = set(optional)
    if "problem_field" not in given:
        keys = set(first_row) if isinstance(first_row, Mapping) else set()
        answer = first_row.get("answer") if isinstance(first_row, Mapping) else None
        if {"question", "answer"} <= keys and isinstance(answer, str) and "####" in answer:
            given = {**GSM8K_FIELDS, **given}
            optional |= {"idx"}
        elif "problem" in keys and keys & {"answer", "solution"}:
            given = {**MATH_FIELDS, **given}
            optional |= _MATH_OPTIONAL
        else:
            raise MathDataError(
                source, None, None,
                f"cannot tell which fields hold the problem and the answer (fields: {sorted(keys)}); "
                "pass problem_field= and answer_field=",
            )
    return _Fields(
        problem=given["problem_field"],
        answer=given.get("answer_field", "answer"),
        solution=given.get("solution_field"),
        level=given.get("level_field"),
        subject=given.get("subject_field"),
        id=given.get("id_field"),
        answer_format=given.get("answer_format", "plain"),
        optional=frozenset(optional),
    )


def _given(**names: Any) -> dict[str, Any]:
    """The field arguments the caller set (``answer_field=None`` counts as set)."""
    given = {k: v for k, v in names.items() if v is not None}
    if names.get("answer_field", "answer") is None:
        given["answer_field"] = None
    if given.get("answer_format") == "plain":
        del given["answer_format"]
    return given


