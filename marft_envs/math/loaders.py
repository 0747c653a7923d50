"""Loaders for math problem files and Hugging Face datasets.

MATH-style and GSM8K-style JSONL, any JSONL / JSON / CSV / TSV / Parquet table with configurable
field names, directories written by ``datasets.Dataset.save_to_disk``, and Hub names. Each reader
yields ``(location, row)`` so a malformed row is reported with its file, line (or row) and field.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from marft_envs.math.records import MathDataError, MathDataset
from marft_envs.math.rows import (
    GSM8K_FIELDS,
    MATH_FIELDS,
    MATH_OPTIONAL_FIELDS,
    OnInvalid,
    UnreadableRow,
    build_dataset,
    check_on_invalid,
    given_fields,
    resolve_fields,
)

__all__ = [
    "DatasetsNotInstalledError",
    "load_gsm8k_jsonl",
    "load_hf_dataset",
    "load_math_jsonl",
    "load_table",
]


class DatasetsNotInstalledError(ImportError):
    """A Hugging Face dataset was asked for and the ``datasets`` package is missing (the message
    says how to install it or what to pass instead)."""


# --- file readers: each yields (location, row) ---------------------------------------------------


def _read_text(path: Path) -> str:
    """The whole file as text; a byte that is not UTF-8 is an error naming the file and offset."""
    data = path.read_bytes()
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as err:
        offset = bom + err.start
        line = data[:offset].count(b"\n") + 1
        raise MathDataError(
            str(path),
            f"byte {offset} (line {line})",
            None,
            f"not valid UTF-8 ({err.reason}: {data[offset : offset + 4]!r}); re-encode the file as UTF-8, "
            "e.g. iconv -f latin1 -t utf-8",
        ) from None


def _read_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {number}", json.loads(line)
        except json.JSONDecodeError as err:
            yield f"line {number}", UnreadableRow(f"invalid JSON ({err.msg} at column {err.colno})")


def _read_json(path: Path) -> Iterator[tuple[str, Any]]:
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("{") and err.lineno > 1:
            yield from _read_jsonl(path)  # a JSON Lines file with a .json name
            return
        raise MathDataError(
            str(path), f"line {err.lineno}", None, f"invalid JSON ({err.msg})"
        ) from None
    if isinstance(data, Mapping):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise MathDataError(
                str(path),
                None,
                None,
                "expected a list of rows, or an object holding exactly one list of rows",
            )
        data = lists[0]
    if not isinstance(data, list):
        raise MathDataError(
            str(path), None, None, f"expected a list of rows, got {type(data).__name__}"
        )
    for number, row in enumerate(data, start=1):
        yield f"row {number}", row


def _read_csv(path: Path, delimiter: str) -> Iterator[tuple[str, Any]]:
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""), delimiter=delimiter)
    start = 2  # line 1 is the header
    for row in reader:
        if None in row:
            yield f"line {start}", UnreadableRow("more values than header columns")
        else:
            yield f"line {start}", row
        start = reader.line_num + 1


def _read_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ImportError(
            "Reading Parquet needs pyarrow: pip install pyarrow (or marft[data])."
        ) from err
    for number, row in enumerate(pq.read_table(path).to_pylist(), start=1):
        yield f"row {number}", row


_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def _read(path: Path, format: str | None) -> Iterator[tuple[str, Any]]:
    fmt = format or _FORMATS.get(path.suffix.lower())
    if fmt is None:
        with path.open(encoding="utf-8-sig", errors="replace") as f:
            head = f.read(4096).lstrip()
        fmt = (
            "json" if head.startswith(("[", "{")) else None
        )  # JSON, or JSON Lines (see _read_json)
    readers = {
        "jsonl": lambda: _read_jsonl(path),
        "json": lambda: _read_json(path),
        "csv": lambda: _read_csv(path, ","),
        "tsv": lambda: _read_csv(path, "\t"),
        "parquet": lambda: _read_parquet(path),
    }
    if fmt not in readers:
        raise ValueError(
            f"Cannot tell the format of {path}; pass format= one of {sorted(readers)}."
        )
    return readers[fmt]()


def _peek(rows: Iterator[tuple[str, Any]]) -> tuple[Any, Iterator[tuple[str, Any]]]:
    """The first readable row (to recognise the format) and all the rows, in order."""
    head: list[tuple[str, Any]] = []
    for item in rows:
        head.append(item)
        if not isinstance(item[1], UnreadableRow):
            return item[1], itertools.chain(head, rows)
    return None, iter(head)


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
    on_invalid: OnInvalid = "raise",
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
        on_invalid: ``"raise"`` (default): a malformed row, invalid JSON line or unreadable gold
            answer stops the load. ``"skip"``: such rows are dropped, one warning line names how
            many and the first few with their reasons, and the dataset lists them in
            ``skipped``. A file with no valid row, or one that is not UTF-8, still raises.

    Raises:
        FileNotFoundError: No such file.
        MathDataError: A malformed row; the message names the file, line (or row) and field.
    """
    given = given_fields(
        problem_field=problem_field,
        answer_field=answer_field,
        solution_field=solution_field,
        level_field=level_field,
        subject_field=subject_field,
        id_field=id_field,
        answer_format=answer_format,
    )
    return _load_file(
        path, given, format=format, name=name, split=split, validate=validate, on_invalid=on_invalid
    )


def _load_file(
    path: str | os.PathLike[str],
    given: Mapping[str, Any],
    *,
    format: str | None,
    name: str | None,
    split: str | None,
    validate: bool,
    on_invalid: OnInvalid = "raise",
    optional: Iterable[str] = (),
) -> MathDataset:
    check_on_invalid(on_invalid)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No dataset file at {path}.")
    first, rows = _peek(_read(path, format))
    fields = resolve_fields(first, given, str(path), optional)
    return build_dataset(
        rows,
        fields,
        source=str(path),
        name=name or path.stem,
        split=split,
        validate=validate,
        on_invalid=on_invalid,
    )


def load_math_jsonl(
    path: str | os.PathLike[str],
    *,
    split: str | None = None,
    name: str | None = None,
    validate: bool = True,
    on_invalid: OnInvalid = "raise",
) -> MathDataset:
    """Load a MATH-format JSONL file.

    Fields: ``problem``, ``solution``, ``answer``, ``level`` (``"Level k"``), ``subject``,
    ``unique_id``; only ``problem`` and one of ``answer`` / ``solution`` are required (without
    ``answer``, the last ``\\boxed{}`` of ``solution`` is the answer). See :func:`load_table`
    (also for ``on_invalid``).
    """
    return _load_file(
        path,
        MATH_FIELDS,
        format="jsonl",
        name=name,
        split=split,
        validate=validate,
        on_invalid=on_invalid,
        optional=MATH_OPTIONAL_FIELDS,
    )


def load_gsm8k_jsonl(
    path: str | os.PathLike[str],
    *,
    split: str | None = None,
    name: str | None = None,
    validate: bool = True,
    on_invalid: OnInvalid = "raise",
) -> MathDataset:
    """Load a GSM8K-format JSONL file.

    Fields: ``question``, ``answer`` (worked text ending in ``#### <number>``), ``idx`` (optional).
    The answer is the text after ``####`` with thousands commas removed; the solution is the
    worked text before it, without the ``<<48/2=24>>`` calculator annotations.
    """
    return _load_file(
        path,
        GSM8K_FIELDS,
        format="jsonl",
        name=name,
        split=split,
        validate=validate,
        on_invalid=on_invalid,
        optional={"idx"},
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
    on_invalid: OnInvalid = "raise",
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
        on_invalid: ``"raise"`` or ``"skip"`` malformed rows (see :func:`load_table`).
        **load_kwargs: Passed to ``datasets.load_dataset`` (``revision``, ``data_files``, ...).

    Raises:
        ImportError: ``datasets`` is not installed.
        RuntimeError: The Hub or the dataset cannot be reached (offline, wrong name or split).
        MathDataError: A malformed row.
    """
    try:
        import datasets
    except ImportError as err:
        raise DatasetsNotInstalledError(
            f"Loading {str(name)!r} needs the `datasets` package: pip install datasets (or "
            "marft[data]); or download the data and pass a local JSONL/JSON/CSV/TSV/Parquet file."
        ) from err
    check_on_invalid(on_invalid)
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
    given = given_fields(
        problem_field=problem_field,
        answer_field=answer_field,
        solution_field=solution_field,
        level_field=level_field,
        subject_field=subject_field,
        id_field=id_field,
        answer_format=answer_format,
    )
    rows: Iterator[tuple[str, Any]] = ((f"row {i}", row) for i, row in enumerate(data, start=1))
    first, rows = _peek(rows)
    fields = resolve_fields(first, given, source)
    return build_dataset(
        rows,
        fields,
        source=source,
        name=Path(name).name if Path(name).is_dir() else str(name),
        split=split,
        validate=validate,
        on_invalid=on_invalid,
    )
