"""An on-disk record of reference solutions that passed their own tests.

Validating a dataset runs every reference in the sandbox (MBPP-sanitized: 427 runs, tens of
seconds on two cores). A pass is recorded under a key that covers everything the verdict depends
on — the program, the tests, the limits, the isolation mode, the harness source and the Python
version — so reloading the same data skips those runs. Failures are never recorded (a timeout
under load is not a verdict on the reference), so they are rerun every time.

The record lives in ``$MARFT_CACHE/code_validation`` or ``~/.cache/marft/code_validation``
(``$XDG_CACHE_HOME`` respected); ``MARFT_CODE_CACHE=0`` turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from marft_envs.sandbox.runner import _HARNESS, Sandbox, SandboxLimits, available_isolation

_CONFINEMENT = Path(__file__).parent.parent / "sandbox" / "confinement.py"

if TYPE_CHECKING:
    from marft_envs.code.problems import CodeProblem

__all__ = ["known_passes", "problem_key", "record_passes", "reference_verdicts"]

logger = logging.getLogger(__name__)

_FILE = "passed-v1.txt"


def _root() -> Path:
    env = os.environ.get("MARFT_CACHE")
    if env:
        return Path(env) / "code_validation"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "marft" / "code_validation"


def _enabled() -> bool:
    return os.environ.get("MARFT_CODE_CACHE", "1") != "0"


def problem_key(
    program: str,
    setup: str,
    tests: Sequence[str],
    limits: SandboxLimits,
    isolation: str,
    entry_point: str | None = None,
) -> str:
    """The key of one validation run: a digest of everything its verdict depends on."""
    digest = hashlib.sha256()
    for source in (_HARNESS, _CONFINEMENT):
        digest.update(source.read_bytes())
    material = json.dumps(
        [
            digest.hexdigest(),
            platform.python_version(),
            isolation,
            asdict(limits),
            program,
            setup,
            list(tests),
            entry_point,
        ]
    )
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


def known_passes(keys: Iterable[str]) -> set[str]:
    """The keys among ``keys`` recorded as passing."""
    if not _enabled():
        return set()
    path = _root() / _FILE
    try:
        recorded = set(path.read_text().split())
    except FileNotFoundError:
        return set()
    except OSError as err:
        logger.warning(
            "Cannot read the validation record %s (%s); validating from scratch.", path, err
        )
        return set()
    return recorded & set(keys)


def record_passes(keys: Iterable[str]) -> None:
    """Append passing keys to the record (one write, so concurrent writers do not interleave)."""
    keys = list(keys)
    if not keys or not _enabled():
        return
    root = _root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / _FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, "".join(f"{k}\n" for k in keys).encode())
        finally:
            os.close(fd)
    except OSError as err:
        logger.warning(
            "Cannot write the validation record under %s (%s); continuing without it.", root, err
        )


@functools.lru_cache(maxsize=8)
def reference_verdicts(
    problems: tuple[CodeProblem, ...], limits: SandboxLimits
) -> tuple[tuple[bool, str], ...]:
    """``(passed, why)`` for each problem's reference; cached per process (env copies share it)
    and, for passes, on disk."""
    isolation = available_isolation() or "none"
    keys = {
        i: problem_key(p.program(p.reference), p.setup, p.tests, limits, isolation, p.entry_point)
        for i, p in enumerate(problems)
        if p.reference is not None
    }
    known = known_passes(keys.values())
    todo = [i for i, key in keys.items() if key not in known]
    results = {}
    if todo:
        sandbox = Sandbox(limits)
        jobs = [
            (problems[i].program(problems[i].reference or ""), problems[i].unit_tests) for i in todo
        ]
        results = dict(zip(todo, sandbox.run_many(jobs), strict=True))
        sandbox.close()
        record_passes(keys[i] for i, r in results.items() if r.all_passed)
    verdicts = []
    for i, p in enumerate(problems):
        if p.reference is None:
            verdicts.append((False, "no reference solution to validate"))
        elif i not in results:
            verdicts.append((True, "passed (recorded)"))
        else:
            r = results[i]
            why = f"the reference passes {r.passed} of {r.total} tests ({r.failure}: {r.detail})"
            verdicts.append((r.all_passed, why))
    return tuple(verdicts)
