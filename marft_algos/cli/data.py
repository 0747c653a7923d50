"""Where a command-line run's problems come from, recorded so that ``marft eval`` reloads them.

Each task family owns how its data is named and loaded: the env class declares a
:class:`~marft_envs.core.data.DataFamily` (``MathEnv.data_family``, ``CodeEnv.data_family``), and
the command line only asks it. A *data plan* is JSON (see :meth:`DataFamily.plan`); it goes into
``config.json`` and every checkpoint, and :func:`load_part` turns one side back into the same
problems.

A local file is recorded by its absolute path and the SHA-256 of its bytes, so ``marft eval RUN``
from another directory reads the same file, and a file changed since the run is refused instead of
silently grading other problems.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marft_algos.cli.parsing import UsageError

__all__ = ["DATA_FLAGS", "family_of", "load_part", "plan_data", "split_kwargs"]

#: The data flags of marft train: sources, then the filters a family may offer.
DATA_FLAGS = ("dataset", "eval_dataset", "levels", "subjects")

_CACHE: dict[tuple[str, str], Any] = {}
_CACHE_SIZE = 8


def family_of(env_id: str) -> Any:
    """The env's :class:`~marft_envs.core.data.DataFamily`, or None when it takes no ``dataset``.

    Raises:
        UsageError: The env takes a ``dataset`` but its class declares no data family.
    """
    import marft_envs

    spec = marft_envs.spec(env_id)
    if not spec.accepts("dataset"):
        return None
    family = spec.data_family
    if family is None:
        raise UsageError(
            f"{env_id} takes a dataset argument but its class declares no data_family, so marft "
            f"cannot tell how to load --dataset for it; pass its data with --env-kwargs "
            f"'{{\"dataset\": ...}}' and leave the data flags out, or give the class a data_family "
            f"(docs/tutorial_custom_env.md)."
        )
    return family


def plan_data(
    family: Any,
    dataset: str | None,
    eval_dataset: str | None,
    filters: Mapping[str, str | None],
) -> dict[str, dict[str, Any]]:
    """The data plan of a run on ``family``'s env (see the module notes)."""
    from marft_envs.core.data import DataPlanError

    try:
        plan = family.plan(dataset, eval_dataset, filters)
    except DataPlanError as exc:
        raise UsageError(str(exc)) from None
    return {side: {**part, **_pinned(part["source"])} for side, part in plan.items()}


def _pinned(source: str) -> dict[str, Any]:
    """A local file as its absolute path and content hash; any other source as given."""
    from marft_algos.common.files import file_sha256

    path = Path(source).expanduser()
    if not path.is_file():
        return {"source": source}  # builtin:train, hf:<name>, or missing (the loader says why)
    return {"source": str(path.resolve()), "sha256": file_sha256(path)}


def _check_pinned(part: Mapping[str, Any]) -> None:
    """Refuse a recorded file that is gone or whose bytes changed since the run recorded it."""
    from marft_algos.common.files import file_sha256

    recorded = part.get("sha256")
    if recorded is None:
        return
    source = part["source"]
    if not Path(source).is_file():
        raise UsageError(
            f"Dataset {source!r}, recorded by the run, is gone; put the file back there, or pass "
            f"--dataset FILE to use other problems."
        )
    actual = file_sha256(source)
    if actual != recorded:
        raise UsageError(
            f"Dataset {source!r} changed since the run recorded it (sha256 {recorded[:12]}... then, "
            f"{actual[:12]}... now), so these are not the run's problems. Restore the file, or pass "
            f"--dataset FILE to use the new problems deliberately (a new run, or marft eval --dataset)."
        )


def load_part(family: Any, part: dict[str, Any]) -> Any:
    """One side of a data plan as ``family``'s dataset (the last few loads are kept in memory).

    Raises:
        UsageError: The source cannot be read, holds no problems, is too small to hold problems
            out, or is a file whose bytes differ from the hash the run recorded.
    """
    from marft_envs.core.data import DataPlanError

    _check_pinned(part)

    key = (family.name, json.dumps(part, sort_keys=True))
    if key not in _CACHE:
        try:
            data = family.load_part(part)
        except DataPlanError as exc:
            raise UsageError(str(exc)) from None
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = data
    return _CACHE[key]


def split_kwargs(env_id: str, env_kwargs: Mapping[str, Any], side: str) -> dict[str, Any]:
    """``env_kwargs`` for one side of a run (``"train"`` or ``"eval"``) of an env that generates its
    tasks in splits (a ``split`` argument, e.g. the puzzles): ``split="train"`` to train and
    ``split="test"`` to evaluate, unless ``--env-kwargs`` names a split itself."""
    import marft_envs

    if "split" in env_kwargs or not marft_envs.spec(env_id).accepts("split"):
        return dict(env_kwargs)
    return {**env_kwargs, "split": "train" if side == "train" else "test"}
