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
:func:`marft_envs.math.grading.check_gold` unless ``validate=False``. With
``on_invalid="skip"`` such rows are dropped instead, reported in one warning line and listed in
:attr:`MathDataset.skipped`.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marft_envs.core.data import DataFamily
from marft_envs.math.grading.extract import last_boxed
from marft_envs.math.loaders import load_gsm8k_jsonl, load_hf_dataset, load_math_jsonl, load_table
from marft_envs.math.records import MathDataError, MathDataset, MathProblem, SkippedRow
from marft_envs.math.rows import (
    GSM8K_FIELDS,
    MATH_FIELDS,
    MATH_OPTIONAL_FIELDS,
    OnInvalid,
    build_dataset,
    check_answers,
    check_on_invalid,
    given_fields,
    report_skipped,
    resolve_fields,
)

__all__ = [
    "BUILTIN_SIZES",
    "GSM8K_FIELDS",
    "MATH_DATA",
    "MATH_FIELDS",
    "MathDataError",
    "MathDataset",
    "MathProblem",
    "SkippedRow",
    "last_boxed",
    "load_builtin",
    "load_dataset",
    "load_gsm8k_jsonl",
    "load_hf_dataset",
    "load_math_jsonl",
    "load_table",
]


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
def _builtin_problems(
    split: str, n: int, levels: tuple[int, ...], families: tuple[tuple[str, Any], ...]
) -> tuple[MathProblem, ...]:
    """Generated once per process: every env copy of a vectorised rollout shares the result."""
    from marft_envs.math.generator import generate_problems

    def keep(p: MathProblem) -> bool:
        return _builtin_holdout(p) == (split == "test")

    names = [name for name, _ in families]
    return tuple(
        generate_problems(n, seed=_BUILTIN_SEEDS[split], levels=levels, families=names, where=keep)
    )


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
    from marft_envs.math.generator import FAMILIES, LEVELS, family

    if split not in _BUILTIN_SEEDS:
        raise ValueError(
            f"The built-in dataset has splits {sorted(_BUILTIN_SEEDS)}, not {split!r}."
        )
    n = BUILTIN_SIZES[split] if size is None else size
    names = tuple(FAMILIES) if families is None else tuple(families)
    # The Family objects are part of the cache key, so re-registering a family name is seen.
    key = tuple((name, family(name)) for name in names)
    problems = _builtin_problems(split, n, tuple(LEVELS if levels is None else levels), key)
    dataset = MathDataset(problems, name="builtin", split=split)
    if validate:
        check_answers(dataset, [f"problem {p.id}" for p in dataset], "builtin", "answer")
    return dataset


def load_dataset(
    source: Any,
    *,
    split: str | None = None,
    levels: Sequence[int] | None = None,
    subjects: Sequence[str] | None = None,
    validate: bool | None = None,
    on_invalid: OnInvalid = "raise",
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
        on_invalid: ``"raise"`` (default) stops at the first malformed row or unreadable gold;
            ``"skip"`` drops such rows, logs one summary line and lists them in
            ``dataset.skipped`` (a source with no valid row still raises). Envs take it through
            ``dataset_kwargs={"on_invalid": "skip"}``.
        **kwargs: Passed to the loader (field names, ``size``, ``config``, ``format``, ...).

    Raises:
        FileNotFoundError: A path that does not exist.
        TypeError: A source of an unsupported type, or options a source does not take.
        MathDataError: A malformed row.
    """
    check_on_invalid(on_invalid)
    if isinstance(source, MathDataset):
        if kwargs:
            raise TypeError(f"A MathDataset is used as is; unexpected options {sorted(kwargs)}.")
        dataset = _checked(source, source.name, validate=bool(validate), on_invalid=on_invalid)
    elif isinstance(source, (list, tuple)):
        dataset = _from_records(
            source,
            split=split,
            validate=True if validate is None else validate,
            on_invalid=on_invalid,
            **kwargs,
        )
    elif isinstance(source, str) and (source == "builtin" or source.startswith("builtin:")):
        part = source.partition(":")[2] or split or "train"
        return load_builtin(
            part, levels=levels, families=subjects, validate=bool(validate), **kwargs
        )
    elif isinstance(source, str) and source.startswith("hf:"):
        dataset = load_hf_dataset(
            source[3:],
            split or "train",
            validate=True if validate is None else validate,
            on_invalid=on_invalid,
            **kwargs,
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
            _check_saved_dataset(path)
            dataset = load_hf_dataset(
                path, split or "train", validate=validate, on_invalid=on_invalid, **kwargs
            )
        else:
            dataset = load_table(
                path, split=split, validate=validate, on_invalid=on_invalid, **kwargs
            )
    else:
        raise TypeError(
            f"Unsupported math dataset source of type {type(source).__name__}: use a MathDataset, a "
            "list of problems or dicts, a path, 'builtin[:train|:test]' or 'hf:<name>'."
        )
    if levels is not None or subjects is not None:
        dataset = dataset.filter(levels=levels, subjects=subjects)
    return dataset


_SAVED_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")
_TABLE_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")


def _check_saved_dataset(path: Path) -> None:
    """A folder is data only when ``datasets``' ``save_to_disk`` wrote it; say what it holds else."""
    if any((path / marker).is_file() for marker in _SAVED_MARKERS):
        return
    tables = sorted(p.name for p in path.iterdir() if p.suffix.lower() in _TABLE_SUFFIXES)
    hint = (
        f"pass one of its data files, e.g. {str(path / tables[0])!r}"
        if tables
        else "it holds no JSONL/JSON/CSV/TSV/Parquet file either; pass a data file"
    )
    raise FileNotFoundError(
        f"The folder {str(path)!r} is not a dataset saved by datasets' save_to_disk (no "
        f"dataset_info.json or dataset_dict.json inside); {hint}."
    )


def _checked(
    dataset: MathDataset, source: str, *, validate: bool, on_invalid: OnInvalid
) -> MathDataset:
    """``dataset`` after the gold check (without its unreadable rows, with ``on_invalid="skip"``)."""
    if not validate or not dataset:
        return dataset
    locations = [f"item {i}" for i in range(1, len(dataset) + 1)]
    kept, _, skipped = check_answers(dataset, locations, source, "answer", on_invalid=on_invalid)
    if not skipped:
        return dataset
    if not kept:
        raise MathDataError(
            source, None, None, f"no valid rows: all {len(skipped)} gold answers are unreadable"
        )
    report_skipped(source, len(kept), skipped)
    return MathDataset(
        kept, name=dataset.name, split=dataset.split, skipped=(*dataset.skipped, *skipped)
    )


def _from_records(
    records: Sequence[Any],
    *,
    split: str | None,
    validate: bool,
    on_invalid: OnInvalid = "raise",
    name: str = "custom",
    **field_names: Any,
) -> MathDataset:
    if all(isinstance(r, MathProblem) for r in records):
        dataset = MathDataset(records, name=name, split=split)
        return _checked(dataset, "<list>", validate=validate, on_invalid=on_invalid)
    unknown = set(field_names) - {*MATH_FIELDS, "answer_format"}
    if unknown:
        raise TypeError(f"Unexpected options for a list of rows: {sorted(unknown)}.")
    given = given_fields(**{"answer_field": "answer", **field_names})
    rows = [(f"item {i}", r) for i, r in enumerate(records, start=1)]
    if not rows:
        raise MathDataError("<list>", None, None, "no rows found")
    if not given.get("problem_field"):
        # Plain dicts like {"problem": ..., "answer": ...} with any of the optional MATH fields.
        given = {**MATH_FIELDS, "id_field": "id", **given}
        fields = resolve_fields(rows[0][1], given, "<list>", MATH_OPTIONAL_FIELDS | {"id"})
    else:
        fields = resolve_fields(rows[0][1], given, "<list>")
    return build_dataset(
        rows,
        fields,
        source="<list>",
        name=name,
        split=split,
        validate=validate,
        on_invalid=on_invalid,
    )


#: The math family's data on command lines. With built-in problems and no filters given, command
#: lines use the problems the built-in model was trained on: the ``digits`` family (single-digit
#: operands, one to three operations; docs/builtin_model.md).
MATH_DATA = DataFamily(
    name="math",
    load=load_dataset,
    sources="builtin:train, builtin:test, a MATH/GSM8K JSONL file, a JSON/CSV/TSV/Parquet table, or hf:<name>",
    filters={"levels": int, "subjects": str},
    builtin_filters={"levels": [1, 2, 3], "subjects": ["digits"]},
    errors=(MathDataError,),
)
