"""Rows of a file or table → :class:`~marft_envs.math.records.MathProblem` records.

Shared by the file loaders (:mod:`marft_envs.math.loaders`) and
:func:`marft_envs.math.data.load_dataset`: field-name resolution, answer and level conversion,
and load-time validation with errors that name the source, the row and the field. With
``on_invalid="skip"`` malformed rows and unreadable gold answers are dropped and reported
instead of stopping the load.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from marft_envs.math.grading.extract import last_boxed
from marft_envs.math.records import MathDataError, MathDataset, MathProblem, SkippedRow

__all__ = [
    "GSM8K_FIELDS",
    "MATH_FIELDS",
    "MATH_OPTIONAL_FIELDS",
    "OnInvalid",
    "RowFields",
    "UnreadableRow",
    "build_dataset",
    "check_answers",
    "check_on_invalid",
    "given_fields",
    "report_skipped",
    "resolve_fields",
    "row_to_problem",
]

logger = logging.getLogger(__name__)

OnInvalid = Literal["raise", "skip"]
_SHOWN = 3  # skipped rows named in the summary line


@dataclass(frozen=True)
class UnreadableRow:
    """Stands for a row a reader could not decode (bad JSON), so a loader can skip it."""

    reason: str


def _is_missing(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or (isinstance(value, str) and not value.strip())
    )


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
        return (
            str(value.numerator)
            if value.denominator == 1
            else (
                f"{'-' if value < 0 else ''}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
            )
        )
    raise ValueError(
        f"cannot use a {type(value).__name__} ({value!r}) as an answer; store it as a string"
    )


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
class RowFields:
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
MATH_OPTIONAL_FIELDS = frozenset({"answer", "solution", "level", "subject", "unique_id"})

_CALCULATOR = re.compile(r"<<[^<>]*>>")


def row_to_problem(
    row: Any, fields: RowFields, source: str, location: str, default_id: str, seen: set[str]
) -> MathProblem:
    if not isinstance(row, Mapping):
        raise MathDataError(
            source, location, None, f"expected an object with fields, got {type(row).__name__}"
        )

    def get(field: str | None, *, required: bool) -> Any:
        if field is None:
            return None
        if field not in row:
            # Optional fields may be absent from single rows; _build rejects a name no row has.
            if required and field not in fields.optional:
                present = ", ".join(map(repr, list(row)[:12]))
                raise MathDataError(
                    source, location, field, f"missing field (fields present: {present})"
                )
            return None
        seen.add(field)
        return row[field]

    problem = get(fields.problem, required=True)
    if not isinstance(problem, str) or not problem.strip():
        raise MathDataError(
            source,
            location,
            fields.problem,
            f"the problem must be a non-empty string, got {problem!r}",
        )
    solution = get(fields.solution, required=False)
    if _is_missing(solution):
        solution = None
    elif not isinstance(solution, str):
        raise MathDataError(
            source, location, fields.solution, f"the solution must be a string, got {solution!r}"
        )
    raw = get(fields.answer, required=fields.solution is None)
    answer_field = fields.answer or fields.solution
    if fields.answer_format == "gsm8k":
        if not isinstance(raw, str) or "####" not in raw:
            raise MathDataError(
                source,
                location,
                answer_field,
                f"expected a worked solution ending in '#### <answer>', got {raw!r}",
            )
        worked, _, tail = raw.rpartition("####")
        answer = tail.strip().replace(",", "")
        solution = solution or _CALCULATOR.sub("", worked).strip() or None
    elif _is_missing(raw):
        # MATH rows without an ``answer`` field carry it as the solution's last \boxed{}.
        boxed = last_boxed(solution) if solution else None
        if not boxed:
            why = "missing answer" + (
                " and no \\boxed{} in the solution" if fields.solution else ""
            )
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


def _gold_error(answer: str) -> str | None:
    """Why the grader cannot read a gold answer, or ``None`` when it can."""
    from marft_envs.math.grading import check_gold  # lazy: grading pulls in sympy

    try:
        check_gold(answer)
    except ValueError as err:
        return str(err)
    return None


def check_on_invalid(on_invalid: str) -> None:
    """Raise a ``ValueError`` naming the value unless ``on_invalid`` is ``"raise"`` or ``"skip"``."""
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}.")


def check_answers(
    problems: Sequence[MathProblem],
    locations: Sequence[str],
    source: str,
    field: str,
    *,
    on_invalid: OnInvalid = "raise",
) -> tuple[list[MathProblem], list[str], list[SkippedRow]]:
    """Check every gold answer with ``check_gold``.

    Returns:
        The problems and locations whose gold is readable, and the rows skipped (always empty
        with ``on_invalid="raise"``).

    Raises:
        MathDataError: The first unreadable gold, with ``on_invalid="raise"``.
    """
    check_on_invalid(on_invalid)
    kept: list[MathProblem] = []
    kept_locations: list[str] = []
    skipped: list[SkippedRow] = []
    for problem, location in zip(problems, locations, strict=True):
        why = _gold_error(problem.answer)
        if why is None:
            kept.append(problem)
            kept_locations.append(location)
            continue
        error = MathDataError(
            source,
            location,
            field,
            f"the gold answer {problem.answer!r} cannot be parsed: {why} (validate=False skips this check; "
            "on_invalid='skip' drops such rows)",
        )
        if on_invalid == "raise":
            raise error
        skipped.append(SkippedRow(location, f"unreadable gold {problem.answer!r}"))
    return kept, kept_locations, skipped


def report_skipped(source: str, kept: int, skipped: Sequence[SkippedRow]) -> None:
    """Log one line saying how many rows were dropped, where the first few were, and why."""
    if not skipped:
        return
    first = "; ".join(f"{s.location}: {_short(s.reason)}" for s in skipped[:_SHOWN])
    more = f"; ... ({len(skipped) - _SHOWN} more)" if len(skipped) > _SHOWN else ""
    logger.warning(
        "%s: skipped %d invalid row(s), kept %d of %d (%s%s)",
        source,
        len(skipped),
        kept,
        kept + len(skipped),
        first,
        more,
    )


def _short(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_dataset(
    rows: Iterable[tuple[str, Any]],
    fields: RowFields,
    *,
    source: str,
    name: str,
    split: str | None,
    validate: bool,
    on_invalid: OnInvalid = "raise",
) -> MathDataset:
    """Turn ``(location, row)`` pairs into a :class:`MathDataset`.

    With ``on_invalid="raise"`` the first malformed row (or unreadable gold, with ``validate``)
    raises :class:`MathDataError`. With ``"skip"`` such rows are dropped, one warning line is
    logged, and the dataset records them in :attr:`MathDataset.skipped`; a source with no valid
    row still raises. A row given as an :class:`UnreadableRow` (bad JSON) counts as malformed.
    """
    check_on_invalid(on_invalid)
    problems: list[MathProblem] = []
    locations: list[str] = []
    skipped: list[SkippedRow] = []
    seen: set[str] = set()
    for location, row in rows:
        try:
            if isinstance(row, UnreadableRow):
                raise MathDataError(source, location, None, row.reason)
            problems.append(
                row_to_problem(
                    row, fields, source, location, f"{name}-{len(problems) + len(skipped)}", seen
                )
            )
        except MathDataError as err:
            if on_invalid == "raise":
                raise
            skipped.append(
                SkippedRow(
                    location,
                    err.reason if err.field is None else f"field {err.field!r}: {err.reason}",
                )
            )
            continue
        locations.append(location)
    if not problems and not skipped:
        raise MathDataError(source, None, None, "no rows found")
    for field in (fields.answer, fields.solution, fields.level, fields.subject, fields.id):
        if field is not None and field not in seen and field not in fields.optional and problems:
            raise MathDataError(source, None, field, "no row has this field; check the field name")
    if validate:
        problems, locations, bad = check_answers(
            problems,
            locations,
            source,
            fields.answer or fields.solution or "answer",
            on_invalid=on_invalid,
        )
        skipped.extend(bad)
    if not problems:
        first = skipped[0]
        raise MathDataError(
            source,
            None,
            None,
            f"no valid rows: all {len(skipped)} rows are invalid (first, {first.location}: {_short(first.reason)})",
        )
    skipped.sort(key=lambda s: _location_order(s.location))
    report_skipped(source, len(problems), skipped)
    return MathDataset(problems, name=name, split=split, skipped=skipped)


def _location_order(location: str) -> tuple[int, str]:
    number = re.search(r"\d+", location)
    return (int(number.group()) if number else 0, location)


def resolve_fields(
    first_row: Any, given: Mapping[str, Any], source: str, optional: Iterable[str] = ()
) -> RowFields:
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
            optional |= MATH_OPTIONAL_FIELDS
        else:
            raise MathDataError(
                source,
                None,
                None,
                f"cannot tell which fields hold the problem and the answer (fields: {sorted(keys)}); "
                "pass problem_field= and answer_field=",
            )
    return RowFields(
        problem=given["problem_field"],
        answer=given.get("answer_field", "answer"),
        solution=given.get("solution_field"),
        level=given.get("level_field"),
        subject=given.get("subject_field"),
        id=given.get("id_field"),
        answer_format=given.get("answer_format", "plain"),
        optional=frozenset(optional),
    )


def given_fields(**names: Any) -> dict[str, Any]:
    """The field arguments the caller set (``answer_field=None`` counts as set)."""
    given = {k: v for k, v in names.items() if v is not None}
    if names.get("answer_field", "answer") is None:
        given["answer_field"] = None
    if given.get("answer_format") == "plain":
        del given["answer_format"]
    return given
