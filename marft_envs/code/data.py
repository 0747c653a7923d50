"""Programming problems: the :class:`CodeProblem` record, :class:`CodeDataset`, and loaders.

Every source ends up as a :class:`CodeDataset` through :func:`load_dataset`, which the code
environments call:

- ``"builtin"`` / ``"builtin:train"`` / ``"builtin:test"``: the seeded generator of
  :mod:`marft_envs.code.generator` (no download, disjoint splits);
- a path to MBPP data (original fields ``text``/``code``/``test_list``/``test_setup_code`` or the
  sanitized ``prompt``/``code``/``test_list``/``test_imports``; a JSON list or JSONL), or to
  HumanEval JSONL (``prompt``, ``test``, ``entry_point``, ``canonical_solution``); the format is
  recognised from the first row;
- a :class:`CodeDataset`, or a list of :class:`CodeProblem` / MBPP or HumanEval dicts.

With ``validate=True`` (the default for files and lists) every reference solution is run against
its own tests in the sandbox; ``on_invalid="raise"`` stops at the first one that fails, naming the
row and why, and ``on_invalid="skip"`` drops such rows with a warning that lists them. Passing
references are recorded on disk (:mod:`marft_envs.code.validation_cache`), so reloading the same
data does not run them again.
"""

from __future__ import annotations

import ast
import builtins
import json
import logging
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from marft_envs.code.problems import CodeDataError, CodeDataset, CodeProblem
from marft_envs.core.data import DataFamily
from marft_envs.sandbox.runner import SandboxLimits

__all__ = [
    "CODE_DATA",
    "CodeDataError",
    "CodeDataset",
    "CodeProblem",
    "load_dataset",
    "load_humaneval",
    "load_mbpp",
    "problem_from_humaneval",
    "problem_from_mbpp",
]

logger = logging.getLogger(__name__)

OnInvalid = Literal["raise", "skip"]


def _string_list(value: Any, source: str, location: str, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value] if value.strip() else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CodeDataError(
            source, location, field, f"expected a list of strings, got {value!r:.80}"
        )
    return tuple(v for v in value if v.strip())


def problem_from_mbpp(
    row: Mapping[str, Any], *, source: str = "<mbpp>", location: str = "row ?"
) -> CodeProblem:
    """An MBPP row (original or sanitized fields) as a :class:`CodeProblem`.

    The task text is shown with the first test as an example (MBPP names the function only in its
    tests); all tests are graded. ``test_imports`` / ``test_setup_code`` run before the tests and
    before the program.
    """
    text = row.get("prompt", row.get("text"))
    if not isinstance(text, str) or not text.strip():
        raise CodeDataError(
            source,
            location,
            "prompt",
            f"the task text (prompt or text) must be a non-empty string, got {text!r:.80}",
        )
    if "test_list" not in row:
        raise CodeDataError(
            source, location, "test_list", f"missing field (fields present: {sorted(row)})"
        )
    tests = _string_list(row["test_list"], source, location, "test_list")
    if not tests:
        raise CodeDataError(source, location, "test_list", "no tests")
    setup_lines = list(_string_list(row.get("test_imports", []), source, location, "test_imports"))
    setup_code = row.get("test_setup_code") or ""
    if not isinstance(setup_code, str):
        raise CodeDataError(
            source, location, "test_setup_code", f"expected a string, got {setup_code!r:.80}"
        )
    setup = "\n".join([*setup_lines, setup_code]).strip()
    code = row.get("code")
    if code is not None and not isinstance(code, str):
        raise CodeDataError(source, location, "code", f"expected a string, got {code!r:.80}")
    task_id = row.get("task_id")
    prompt = f"{text.strip()}\nYour code should pass this test:\n```python\n{tests[0]}\n```"
    return CodeProblem(
        prompt=prompt,
        tests=tests,
        setup=setup,
        preamble=setup,
        reference=code or None,
        entry_point=_called_name(tests[0], _defined_names(code or "")),
        id=f"mbpp-{task_id}" if task_id is not None else None,
    )


def _called_name(test: str, defined: frozenset[str] = frozenset()) -> str | None:
    """The function a test calls: the first called name the reference defines (even a builtin's
    name, as MBPP 126's ``sum``), else the first called name that is not a builtin."""
    try:
        tree = _parse(test)
    except SyntaxError:
        return None
    called = [
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]
    for name in called:
        if name in defined:
            return name
    return next((name for name in called if not hasattr(builtins, name)), None)


def _parse(code: str) -> ast.Module:
    """Parse dataset code without warnings about its style (invalid escapes in MBPP's regexes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
        return ast.parse(code)


def _defined_names(code: str) -> frozenset[str]:
    """The functions and classes a program defines at its top level."""
    try:
        tree = _parse(code)
    except SyntaxError:
        return frozenset()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return frozenset(node.name for node in tree.body if isinstance(node, kinds))


def _check_body_tests(test: str, source: str, location: str) -> tuple[str, ...]:
    """The statements of ``check(candidate)``, grouped so that each group ends with an assert."""
    try:
        tree = ast.parse(test)
    except SyntaxError as err:
        raise CodeDataError(
            source, location, "test", f"the test code does not parse: {err}"
        ) from None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        raise CodeDataError(source, location, "test", "no `def check(candidate)` in the test code")
    groups: list[str] = []
    pending: list[str] = []
    for statement in checks[-1].body:
        pending.append(ast.unparse(statement))
        if any(isinstance(n, ast.Assert) for n in ast.walk(statement)):
            groups.append("\n".join(pending))
            pending = []
    if pending and groups:
        groups[-1] += "\n" + "\n".join(pending)
    if not groups:
        raise CodeDataError(source, location, "test", "check(candidate) contains no assert")
    return tuple(groups)


def problem_from_humaneval(
    row: Mapping[str, Any], *, source: str = "<humaneval>", location: str = "row ?"
) -> CodeProblem:
    """A HumanEval row as a :class:`CodeProblem`.

    Each top-level statement of ``check(candidate)`` that contains an ``assert`` counts as one test
    (statements before it run with it). The prompt (signature, docstring, helpers) is the preamble,
    so a program may use its helpers; the reference is ``prompt + canonical_solution``.
    """
    for field in ("prompt", "test", "entry_point"):
        if not isinstance(row.get(field), str) or not row[field].strip():
            raise CodeDataError(
                source, location, field, f"must be a non-empty string, got {row.get(field)!r:.80}"
            )
    entry = row["entry_point"].strip()
    if not entry.isidentifier():
        raise CodeDataError(source, location, "entry_point", f"{entry!r} is not a Python name")
    solution = row.get("canonical_solution")
    if solution is not None and not isinstance(solution, str):
        raise CodeDataError(
            source, location, "canonical_solution", f"expected a string, got {solution!r:.80}"
        )
    prompt = (
        f"Write the Python function `{entry}` described below (keep its signature):\n"
        f"```python\n{row['prompt'].strip()}\n```"
    )
    return CodeProblem(
        prompt=prompt,
        tests=_check_body_tests(row["test"], source, location),
        setup=f"{row['test']}\n\ncandidate = {entry}\n",
        preamble=row["prompt"],
        reference=row["prompt"] + solution if solution else None,
        entry_point=entry,
        id=str(row.get("task_id")) if row.get("task_id") is not None else None,
    )


def _row_kind(row: Any) -> str | None:
    if not isinstance(row, Mapping):
        return None
    if "test_list" in row:
        return "mbpp"
    if {"test", "entry_point"} <= set(row):
        return "humaneval"
    return None


# --- files ---------------------------------------------------------------------------------------


def _read_rows(path: Path) -> Iterator[tuple[str, Any]]:
    text = path.read_text(encoding="utf-8-sig")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise CodeDataError(
                str(path), f"line {err.lineno}", None, f"invalid JSON ({err.msg})"
            ) from None
        for number, row in enumerate(data, start=1):
            yield f"row {number}", row
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {number}", json.loads(line)
        except json.JSONDecodeError as err:
            raise CodeDataError(
                str(path), f"line {number}", None, f"invalid JSON ({err.msg} at column {err.colno})"
            ) from None


def _load_file(path: str | os.PathLike[str], kind: str | None, **options: Any) -> CodeDataset:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No code dataset at {str(path)!r}. Use 'builtin', 'builtin:train', 'builtin:test', or an "
            "existing MBPP (JSON list or JSONL) or HumanEval (JSONL) file."
        )
    return _build(
        _read_rows(path),
        kind,
        source=str(path),
        name=options.pop("name", None) or path.stem,
        **options,
    )


def load_mbpp(
    path: str | os.PathLike[str],
    *,
    validate: bool = True,
    on_invalid: OnInvalid = "raise",
    name: str | None = None,
    split: str | None = None,
    limits: SandboxLimits | None = None,
) -> CodeDataset:
    """Load MBPP (original or sanitized; a JSON list or JSONL).

    Args:
        path: The file.
        validate: Run every reference solution (``code``) against its tests in the sandbox.
        on_invalid: ``"raise"`` at the first invalid row, or ``"skip"`` invalid rows with a warning.
        name: Dataset name (default: the file stem).
        split: Split label stored on the dataset.
        limits: Sandbox limits for validation (default :class:`SandboxLimits`).

    Raises:
        FileNotFoundError: No such file.
        CodeDataError: A malformed row, or (``on_invalid="raise"``) a reference that fails its tests.
    """
    return _load_file(
        path,
        "mbpp",
        validate=validate,
        on_invalid=on_invalid,
        name=name,
        split=split,
        limits=limits,
    )


def load_humaneval(
    path: str | os.PathLike[str],
    *,
    validate: bool = True,
    on_invalid: OnInvalid = "raise",
    name: str | None = None,
    split: str | None = None,
    limits: SandboxLimits | None = None,
) -> CodeDataset:
    """Load HumanEval JSONL (``prompt``, ``test``, ``entry_point``, ``canonical_solution``).

    Arguments as for :func:`load_mbpp`; the reference is ``prompt + canonical_solution``.
    """
    return _load_file(
        path,
        "humaneval",
        validate=validate,
        on_invalid=on_invalid,
        name=name,
        split=split,
        limits=limits,
    )


def _build(
    rows: Iterable[tuple[str, Any]],
    kind: str | None,
    *,
    source: str,
    name: str,
    split: str | None,
    validate: bool,
    on_invalid: OnInvalid,
    limits: SandboxLimits | None,
) -> CodeDataset:
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}.")
    problems: list[CodeProblem] = []
    locations: list[str] = []
    for location, row in rows:
        if isinstance(row, CodeProblem):
            problem = row
        else:
            row_kind = kind or _row_kind(row)
            if row_kind is None:
                fields = sorted(row) if isinstance(row, Mapping) else type(row).__name__
                raise CodeDataError(
                    source,
                    location,
                    None,
                    f"neither an MBPP row (test_list) nor a HumanEval row (test, entry_point): {fields}",
                )
            if not isinstance(row, Mapping):
                raise CodeDataError(
                    source,
                    location,
                    None,
                    f"expected an object with fields, got {type(row).__name__}",
                )
            convert = problem_from_mbpp if row_kind == "mbpp" else problem_from_humaneval
            problem = convert(row, source=source, location=location)
        problems.append(problem)
        locations.append(location)
    if not problems:
        raise CodeDataError(source, None, None, "no rows found")
    if validate:
        keep = _validate(
            tuple(problems), tuple(locations), source, on_invalid, limits or SandboxLimits()
        )
        problems = [p for p, k in zip(problems, keep, strict=True) if k]
    return CodeDataset(problems, name=name, split=split)


def _validate(
    problems: tuple[CodeProblem, ...],
    locations: tuple[str, ...],
    source: str,
    on_invalid: OnInvalid,
    limits: SandboxLimits,
) -> list[bool]:
    """Which problems' references pass their own tests (cached per process: env copies share it)."""
    from marft_envs.code.validation_cache import reference_verdicts

    verdicts = reference_verdicts(problems, limits)
    keep, bad = [], []
    for problem, location, (ok, why) in zip(problems, locations, verdicts, strict=True):
        keep.append(ok)
        if not ok:
            if on_invalid == "raise":
                raise CodeDataError(
                    source,
                    location,
                    "code" if problem.reference is not None else None,
                    f"{why} (validate=False skips this check; on_invalid='skip' drops such rows)",
                )
            bad.append(f"{location} ({problem.id}): {why}")
    if bad:
        logger.warning(
            "Skipped %d of %d rows of %s whose reference fails: %s",
            len(bad),
            len(problems),
            source,
            "; ".join(bad[:10]),
        )
    return keep


# --- the one entry point -------------------------------------------------------------------------


def load_dataset(
    source: Any,
    *,
    split: str | None = None,
    validate: bool | None = None,
    on_invalid: OnInvalid = "raise",
    limits: SandboxLimits | None = None,
    **kwargs: Any,
) -> CodeDataset:
    """Load programming problems from any supported source; the one entry point the envs use.

    Args:
        source: A :class:`CodeDataset`; a list of :class:`CodeProblem` or MBPP/HumanEval dicts;
            ``"builtin"`` / ``"builtin:train"`` / ``"builtin:test"``; or a path (MBPP JSON/JSONL or
            HumanEval JSONL, recognised from the first row).
        split: Built-in split, or the label stored on a loaded dataset.
        validate: Run reference solutions against their tests (default: ``True`` for files and
            lists, ``False`` for the built-in set, which the test suite checks).
        on_invalid: ``"raise"`` or ``"skip"`` rows whose reference fails (with ``validate``).
        limits: Sandbox limits for validation.
        **kwargs: Passed to the generator for ``builtin`` sources (``size=``, ``families=``).

    Raises:
        FileNotFoundError: A path that does not exist.
        TypeError: A source of an unsupported type, or options a source does not take.
        CodeDataError: A malformed row, or an invalid reference with ``on_invalid="raise"``.
    """
    if isinstance(source, str) and (source == "builtin" or source.startswith("builtin:")):
        from marft_envs.code.generator import load_builtin

        part = source.partition(":")[2] or split or "train"
        dataset = load_builtin(part, **kwargs)
        if validate:
            keep = _validate(
                tuple(dataset),
                tuple(f"problem {p.id}" for p in dataset),
                "builtin",
                on_invalid,
                limits or SandboxLimits(),
            )
            dataset = CodeDataset(
                [p for p, k in zip(dataset, keep, strict=True) if k], name="builtin", split=part
            )
        return dataset
    if kwargs:
        raise TypeError(
            f"Unexpected options {sorted(kwargs)} for the code dataset source {source!r:.80}."
        )
    options: dict[str, Any] = {
        "validate": True if validate is None else validate,
        "on_invalid": on_invalid,
        "limits": limits,
        "split": split,
    }
    if isinstance(source, CodeDataset):
        if validate:
            return _build(
                ((f"item {i}", p) for i, p in enumerate(source, 1)),
                None,
                source=source.name,
                name=source.name,
                **{**options, "split": source.split},
            )
        return source
    if isinstance(source, (list, tuple)):
        return _build(
            ((f"item {i}", r) for i, r in enumerate(source, 1)),
            None,
            source="<list>",
            name="custom",
            **options,
        )
    if isinstance(source, (str, os.PathLike)):
        return _load_file(source, None, **options)
    raise TypeError(
        f"Unsupported code dataset source of type {type(source).__name__}: use a CodeDataset, a list of "
        "problems or MBPP/HumanEval dicts, a path, or 'builtin[:train|:test]'."
    )


#: The code family's data on command lines: built-in generated tasks, MBPP or HumanEval files.
CODE_DATA = DataFamily(
    name="code",
    load=load_dataset,
    sources="builtin:train, builtin:test, an MBPP JSON/JSONL file or a HumanEval JSONL file",
    errors=(CodeDataError,),
)
