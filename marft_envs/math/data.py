"""Math problem data: the :class:`MathProblem` record, :class:`MathDataset`, and loaders.

Every source ends up as a :class:`MathDataset` of :class:`MathProblem` records, through one entry
point, :func:`load_dataset`, which the math environments call:

- ``"builtin"`` / ``"builtin:train"`` / ``"builtin:test"``: the seeded generator of
  :mod:`marft_envs.math.generator` (no download, disjoint splits);
- a path: MATH-style or GSM8K-style JSONL, or any JSONL / JSON / CSV / TSV / Parquet table, or a
  directory written by ``datasets.Dataset.save_to_disk``;
- ``"hf:<name>"``: a Hugging Face Hub dataset (needs ``datasets`` and network access);
- a :class:`MathDataset`, or a list of :class:`MathProblem` / dicts.

Rows are validated at load time: a malformed row raises :class:`MathDataError` (a ``ValueError``)
naming the source, the line or row (1-based) and the field, and gold answers are checked with
:func:`marft_envs.math.grading.check_gold` unless ``validate=False``.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import itertools
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np

__all__ = [
    "BUILTIN_SIZES",
    "GSM8K_FIELDS",
    "MATH_FIELDS",
    "MathDataError",
    "MathDataset",
    "MathProblem",
    "last_boxed",
    "load_builtin",
    "load_dataset",
    "load_gsm8k_jsonl",
    "load_hf_dataset",
    "load_math_jsonl",
    "load_table",
]


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


# --- file readers: each yields (location, row) ---------------------------------------------------


def _read_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield f"line {number}", json.loads(line)
            except json.JSONDecodeError as err:
                raise MathDataError(str(path), f"line {number}", None, f"invalid JSON ({err.msg} at column {err.colno})") from None


def _read_json(path: Path) -> Iterator[tuple[str, Any]]:
    text = path.read_text(encoding="utf-8-sig")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("{") and err.lineno > 1:
            yield from _read_jsonl(path)  # a JSON Lines file with a .json name
            return
        raise MathDataError(str(path), f"line {err.lineno}", None, f"invalid JSON ({err.msg})") from None
    if isinstance(data, Mapping):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise MathDataError(str(path), None, None, "expected a list of rows, or an object holding exactly one list of rows")
        data = lists[0]
    if not isinstance(data, list):
        raise MathDataError(str(path), None, None, f"expected a list of rows, got {type(data).__name__}")
    for number, row in enumerate(data, start=1):
        yield f"row {number}", row


def _read_csv(path: Path, delimiter: str) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        start = 2  # line 1 is the header
        for row in reader:
            if None in row:
                raise MathDataError(str(path), f"line {start}", None, "more values than header columns")
            yield f"line {start}", row
            start = reader.line_num + 1


def _read_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ImportError("Reading Parquet needs pyarrow: pip install pyarrow (or marft[data]).") from err
    for number, row in enumerate(pq.read_table(path).to_pylist(), start=1):
        yield f"row {number}", row


_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet"}


def _read(path: Path, format: str | None) -> Iterator[tuple[str, Any]]:
    fmt = format or _FORMATS.get(path.suffix.lower())
    if fmt is None:
        with path.open(encoding="utf-8-sig", errors="replace") as f:
            head = f.read(4096).lstrip()
        fmt = "json" if head.startswith(("[", "{")) else None  # JSON, or JSON Lines (see _read_json)
    readers = {
        "jsonl": lambda: _read_jsonl(path),
        "json": lambda: _read_json(path),
        "csv": lambda: _read_csv(path, ","),
        "tsv": lambda: _read_csv(path, "\t"),
        "parquet": lambda: _read_parquet(path),
    }
    if fmt not in readers:
        raise ValueError(f"Cannot tell the format of {path}; pass format= one of {sorted(readers)}.")
    return readers[fmt]()


def _peek(rows: Iterator[tuple[str, Any]]) -> tuple[Any, Iterator[tuple[str, Any]]]:
    """The first row (to recognise the format) and all the rows, first included."""
    first = next(rows, None)
    return (None, iter(())) if first is None else (first[1], itertools.chain([first], rows))


# --- public loaders ------------------------------------------------------------------------------


def load_table(
    path: str | os.PathLike[str],
    *,
    problem_field: str | None = None,
    answer_field: str | None = "answer",
    solution_field: str | None = None,
    level_field: str | None = None,
    subject_field: str | None = None,
    id_field: str | None = None,
    answer_format: Literal["plain", "gsm8k"] = "plain",
    format: str | None = None,
    name: str | None = None,
    split: str | None = None,
    validate: bool = True,
) -> MathDataset:
    """Load problems from a JSONL, JSON, CSV, TSV or Parquet file with configurable field names.

    The format comes from the extension (``.jsonl``/``.ndjson``, ``.json``, ``.csv``, ``.tsv``,
    ``.parquet``/``.pq``) or ``format``. A JSON file holds a list of rows (or an object with one list).
    With ``problem_field=None`` the MATH or GSM8K field names are recognised from the first row.

    Answers that are not strings are converted exactly: ints as written, integral floats without
    the ``.0`` (``3.0 → "3"``), other floats by their shortest round-trip decimal (``0.1 → "0.1"``,
    never scientific notation). Strings are kept as written, stripped (a CSV ``"3.0"`` stays
    ``"3.0"``). A missing, empty, NaN, infinite or boolean answer is an error; when ``answer_field``
    is absent and a solution is given, the solution's last ``\\boxed{}`` is the answer.

    Args:
        path: The file.
        problem_field: Field holding the problem text (``None``: recognise MATH / GSM8K).
        answer_field: Field holding the gold answer (``None``: last ``\\boxed{}`` of the solution).
        solution_field: Field holding a worked solution, if any.
        level_field: Field holding the level (int, ``"3"`` or ``"Level 3"``), if any.
        subject_field: Field holding the subject, if any.
        id_field: Field holding a row id, if any (default id: ``<name>-<index>``).
        answer_format: ``"plain"``, or ``"gsm8k"`` (answer after ``####``, commas removed; the text
            before it, without ``<<...>>`` calculator notes, is the solution).
        format: Override the format (``"jsonl"``, ``"json"``, ``"csv"``, ``"tsv"``, ``"parquet"``).
        name: Dataset name (default: the file stem).
        split: Split label stored on the dataset.
        validate: Check every gold answer with :func:`marft_envs.math.grading.check_gold`.

    Raises:
        FileNotFoundError: No such file.
        MathDataError: A malformed row; the message names the file, line (or row) and field.
    """
    given = _given(
        problem_field=problem_field,
        answer_field=answer_field,
        solution_field=solution_field,
        level_field=level_field,
        subject_field=subject_field,
        id_field=id_field,
        answer_format=answer_format,
    )
    return _load_file(path, given, format=format, name=name, split=split, validate=validate)


def _load_file(
    path: str | os.PathLike[str],
    given: Mapping[str, Any],
    *,
    format: str | None,
    name: str | None,
    split: str | None,
    validate: bool,
    optional: Iterable[str] = (),
) -> MathDataset:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No dataset file at {path}.")
    first, rows = _peek(_read(path, format))
    fields = _resolve_fields(first, given, str(path), optional)
    return _build(rows, fields, source=str(path), name=name or path.stem, split=split, validate=validate)


def load_math_jsonl(
    path: str | os.PathLike[str], *, split: str | None = None, name: str | None = None, validate: bool = True
) -> MathDataset:
    """Load a MATH-format JSONL file.

    Fields: ``problem``, ``solution``, ``answer``, ``level`` (``"Level k"``), ``subject``,
    ``unique_id``; only ``problem`` and one of ``answer`` / ``solution`` are required (without
    ``answer``, the last ``\\boxed{}`` of ``solution`` is the answer). See :func:`load_table`.
    """
    return _load_file(
        path, MATH_FIELDS, format="jsonl", name=name, split=split, validate=validate, optional=_MATH_OPTIONAL
    )


def load_gsm8k_jsonl(
    path: str | os.PathLike[str], *, split: str | None = None, name: str | None = None, validate: bool = True
) -> MathDataset:
    """Load a GSM8K-format JSONL file.

    Fields: ``question``, ``answer`` (worked text ending in ``#### <number>``), ``idx`` (optional).
    The answer is the text after ``####`` with thousands commas removed; the solution is the
    worked text before it, without the ``<<48/2=24>>`` calculator annotations.
    """
    return _load_file(
        path, GSM8K_FIELDS, format="jsonl", name=name, split=split, validate=validate, optional={"idx"}
    )


def load_hf_dataset(
    name: str | os.PathLike[str],
    split: str = "train",
    *,
    config: str | None = None,
    problem_field: str | None = None,
    answer_field: str | None = "answer",
    solution_field: str | None = None,
    level_field: str | None = None,
    subject_field: str | None = None,
    id_field: str | None = None,
    answer_format: Literal["plain", "gsm8k"] = "plain",
    validate: bool = True,
    **load_kwargs: Any,
) -> MathDataset:
    """Load a Hugging Face dataset by Hub name, or from a directory written by ``save_to_disk``.

    Needs the ``datasets`` package (``pip install datasets``); Hub names need network access
    unless cached. Field arguments are those of :func:`load_table` (``problem_field=None``
    recognises the MATH and GSM8K formats). Rows are numbered ``row 1, row 2, ...`` in errors.

    Args:
        name: Hub name (``"openai/gsm8k"``) or local ``save_to_disk`` directory.
        split: Split to load.
        config: Hub configuration name (``"main"`` for GSM8K).
        validate: Check every gold answer with ``check_gold``.
        **load_kwargs: Passed to ``datasets.load_dataset`` (``revision``, ``data_files``, ...).

    Raises:
        ImportError: ``datasets`` is not installed.
        RuntimeError: The Hub or the dataset cannot be reached (offline, wrong name or split).
        MathDataError: A malformed row.
    """
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            "Loading Hugging Face datasets needs the `datasets` package: pip install datasets "
            "(or marft[data]); or download the data and pass a local file to load_dataset."
        ) from err
    source = f"hf:{name}[{split}]"
    if Path(name).is_dir():
        data = datasets.load_from_disk(str(name))
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ValueError(f"{name} has splits {sorted(data)}, not {split!r}.")
            data = data[split]
    else:
        try:
            data = datasets.load_dataset(str(name), config, split=split, **load_kwargs)
        except Exception as err:  # the hub raises many types: offline, 404, bad split, auth
            raise RuntimeError(
                f"Could not load the Hugging Face dataset {str(name)!r} (config {config!r}, split "
                f"{split!r}): {type(err).__name__}: {err}. Check the name and split and your network "
                "(HF_HUB_OFFLINE), or download the data and pass a local file."
            ) from err
    given = _given(
        problem_field=problem_field,
        answer_field=answer_field,
        solution_field=solution_field,
        level_field=level_field,
        subject_field=subject_field,
        id_field=id_field,
        answer_format=answer_format,
    )
    rows = ((f"row {i}", row) for i, row in enumerate(data, start=1))
    first, rows = _peek(rows)
    fields = _resolve_fields(first, given, source)
    return _build(rows, fields, source=source, name=Path(name).name if Path(name).is_dir() else str(name),
                  split=split, validate=validate)


BUILTIN_SIZES: dict[str, int] = {"train": 5000, "test": 500}
"""Default number of problems in each built-in split."""

_BUILTIN_SEEDS = {"train": 1, "test": 2}


def _builtin_holdout(problem: MathProblem) -> bool:
    """Whether a problem text belongs to the built-in test split (about 1 in 10 texts).

    Deciding by a hash of the text, not by the seed, keeps the splits disjoint whatever sizes,
    levels or families are asked for.
    """
    return int(hashlib.sha256(problem.problem.encode("utf-8")).hexdigest()[:8], 16) % 10 == 0


@functools.lru_cache(maxsize=16)
def _builtin_problems(split: str, n: int, levels: tuple[int, ...], families: tuple[tuple[str, Any], ...]) -> tuple[MathProblem, ...]:
    """Generated once per process: every env copy of a vectorised rollout shares the result."""
    from marft_envs.math.generator import generate_problems

    def keep(p: MathProblem) -> bool:
        return _builtin_holdout(p) == (split == "test")

    names = [name for name, _ in families]
    return tuple(generate_problems(n, seed=_BUILTIN_SEEDS[split], levels=levels, families=names, where=keep))


def load_builtin(
    split: str = "train",
    *,
    size: int | None = None,
    levels: Sequence[int] | None = None,
    families: Sequence[str] | None = None,
    validate: bool = False,
) -> MathDataset:
    """The built-in generated problem set (:mod:`marft_envs.math.generator`), no download needed.

    ``train`` and ``test`` use fixed seeds and never share a problem text. Answers are exact by
    construction, so ``validate`` defaults to ``False`` (the test suite checks them all).

    Args:
        split: ``"train"`` (5000 problems by default) or ``"test"`` (500).
        size: Number of problems instead of the default.
        levels: Difficulty levels 1-5 to include (default: all, evenly).
        families: Generator families to include (default: all, evenly); see ``FAMILIES``.
        validate: Check every answer with ``check_gold``.
    """
    from marft_envs.math.generator import FAMILIES, LEVELS  # generator imports this module

    if split not in _BUILTIN_SEEDS:
        raise ValueError(f"The built-in dataset has splits {sorted(_BUILTIN_SEEDS)}, not {split!r}.")
    n = BUILTIN_SIZES[split] if size is None else size
    names = tuple(FAMILIES) if families is None else tuple(families)
    # The Family objects are part of the cache key, so re-registering a family name is seen.
    key = tuple((name, FAMILIES.get(name)) for name in names)
    problems = _builtin_problems(split, n, tuple(LEVELS if levels is None else levels), key)
    dataset = MathDataset(problems, name="builtin", split=split)
    if validate:
        _check_answers(dataset, [f"problem {p.id}" for p in dataset], "builtin", "answer")
    return dataset


def load_dataset(
    source: Any,
    *,
    split: str | None = None,
    levels: Sequence[int] | None = None,
    subjects: Sequence[str] | None = None,
    validate: bool | None = None,
    **kwargs: Any,
) -> MathDataset:
    """Load math problems from any supported source; the one entry point the envs use.

    Sources:

    - a :class:`MathDataset` (returned as is, after filtering);
    - a list or tuple of :class:`MathProblem` or dicts (field names as in :func:`load_table`);
    - ``"builtin"`` (= ``"builtin:train"``) or ``"builtin:test"``: :func:`load_builtin`
      (``size=``, ``families=``; ``levels`` picks generator levels, ``subjects`` families);
    - ``"hf:<name>"``: :func:`load_hf_dataset` (``split`` defaults to ``"train"``);
    - a path: a directory from ``save_to_disk``, or a file read by :func:`load_table` (MATH and
      GSM8K JSONL are recognised from their fields).

    Args:
        source: See above.
        split: Split to load (``hf:``) or to label the dataset with (files, lists).
        levels: Keep only these levels.
        subjects: Keep only these subjects (built-in: generator families).
        validate: Check gold answers with ``check_gold`` (default: ``True`` except for the
            built-in set, whose answers are exact by construction).
        **kwargs: Passed to the loader (field names, ``size``, ``config``, ``format``, ...).

    Raises:
        FileNotFoundError: A path that does not exist.
        TypeError: A source of an unsupported type, or options a source does not take.
        MathDataError: A malformed row.
    """
    if isinstance(source, MathDataset):
        if kwargs:
            raise TypeError(f"A MathDataset is used as is; unexpected options {sorted(kwargs)}.")
        if validate:
            _check_answers(source, [f"item {i}" for i in range(1, len(source) + 1)], source.name, "answer")
        dataset = source
    elif isinstance(source, (list, tuple)):
        dataset = _from_records(source, split=split, validate=True if validate is None else validate, **kwargs)
    elif isinstance(source, str) and (source == "builtin" or source.startswith("builtin:")):
        part = source.partition(":")[2] or split or "train"
        return load_builtin(
            part, levels=levels, families=subjects, validate=bool(validate), **kwargs
        )
    elif isinstance(source, str) and source.startswith("hf:"):
        dataset = load_hf_dataset(
            source[3:], split or "train", validate=True if validate is None else validate, **kwargs
        )
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(
                f"No math dataset at {str(source)!r}. Use 'builtin', 'builtin:train', 'builtin:test', "
                "'hf:<name>', an existing JSONL/JSON/CSV/TSV/Parquet file, or a save_to_disk directory."
            )
        validate = True if validate is None else validate
        if path.is_dir():
            dataset = load_hf_dataset(path, split or "train", validate=validate, **kwargs)
        else:
            dataset = load_table(path, split=split, validate=validate, **kwargs)
    else:
        raise TypeError(
            f"Unsupported math dataset source of type {type(source).__name__}: use a MathDataset, a "
            "list of problems or dicts, a path, 'builtin[:train|:test]' or 'hf:<name>'."
        )
    if levels is not None or subjects is not None:
        dataset = dataset.filter(levels=levels, subjects=subjects)
    return dataset


def _from_records(
    records: Sequence[Any], *, split: str | None, validate: bool, name: str = "custom", **field_names: Any
) -> MathDataset:
    if all(isinstance(r, MathProblem) for r in records):
        dataset = MathDataset(records, name=name, split=split)
        if validate and dataset:
            _check_answers(dataset, [f"item {i}" for i in range(1, len(dataset) + 1)], "<list>", "answer")
        return dataset
    unknown = set(field_names) - {*MATH_FIELDS, "answer_format"}
    if unknown:
        raise TypeError(f"Unexpected options for a list of rows: {sorted(unknown)}.")
    given = _given(**{"answer_field": "answer", **field_names})
    rows = [(f"item {i}", r) for i, r in enumerate(records, start=1)]
    if not rows:
        raise MathDataError("<list>", None, None, "no rows found")
    if not given.get("problem_field"):
        # Plain dicts like {"problem": ..., "answer": ...} with any of the optional MATH fields.
        given = {**MATH_FIELDS, "id_field": "id", **given}
        fields = _resolve_fields(rows[0][1], given, "<list>", _MATH_OPTIONAL | {"id"})
    else:
        fields = _resolve_fields(rows[0][1], given, "<list>")
    return _build(rows, fields, source="<list>", name=name, split=split, validate=validate)
