"""Where a command-line run's problems come from, recorded so that ``marft eval`` reloads them.

A *data plan* is JSON: for the training and the held-out side, the source (``builtin:train``, a
file, ``hf:<name>``), the level and subject filters, and, when the held-out problems are carved
out of the training source, the split that did it. The plan goes into ``config.json`` and every
checkpoint; :func:`load_part` turns one side back into the same :class:`MathDataset`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from marft_algos.cli.parsing import UsageError
from marft_algos.cli.presets import DEMO_DATA

__all__ = ["HELD_OUT_FRACTION", "load_part", "plan_data", "split_kwargs"]

#: Share of a single --dataset held out for evaluation when no --eval-dataset is given.
HELD_OUT_FRACTION = 0.1


def _filters(source: str, levels: str | None, subjects: str | None) -> dict[str, Any]:
    """``load_dataset`` filters: the flags as given, else the demo's built-in problems, else none."""
    builtin = source.startswith("builtin")
    out: dict[str, Any] = {}
    for key, given in (("levels", levels), ("subjects", subjects)):
        if given is None:
            out[key] = DEMO_DATA[key] if builtin else None
        elif given in ("", "all"):
            out[key] = None
        elif key == "levels":
            try:
                out[key] = [int(x) for x in given.split(",")]
            except ValueError:
                raise UsageError(
                    f"--levels {given!r}: write comma-separated integers, e.g. 1,2, or 'all'."
                ) from None
        else:
            out[key] = given.split(",")
    return out


def plan_data(
    dataset: str | None, eval_dataset: str | None, levels: str | None, subjects: str | None
) -> dict[str, dict[str, Any]]:
    """The data plan of a run (see the module notes)."""
    source = dataset or "builtin:train"
    filters = _filters(source, levels, subjects)
    if eval_dataset is not None:
        return {"train": {"source": source, **filters}, "eval": {"source": eval_dataset, **filters}}
    if source.startswith("builtin"):
        return {
            "train": {"source": source, **filters},
            "eval": {"source": "builtin:test", **filters},
        }
    split = {"test_size": HELD_OUT_FRACTION, "split_seed": 0}
    return {
        "train": {"source": source, **filters, **split, "side": "train"},
        "eval": {"source": source, **filters, **split, "side": "test"},
    }


def load_part(part: dict[str, Any]) -> Any:
    """One side of a data plan as a :class:`~marft_envs.math.data.MathDataset`.

    Raises:
        UsageError: The source cannot be read as text, or is too small to hold problems out.
    """
    return _load(json.dumps(part, sort_keys=True))


@functools.lru_cache(maxsize=8)
def _load(key: str) -> Any:
    from marft_envs.math.data import load_dataset
    from marft_envs.math.records import MathDataError

    part = json.loads(key)
    source = part["source"]
    try:
        data = load_dataset(source, levels=part.get("levels"), subjects=part.get("subjects"))
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"Dataset {source!r} is not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r} at "
            f"position {exc.start}); re-save it as UTF-8, e.g. iconv -f latin1 -t utf-8 in > out."
        ) from None
    except MathDataError as exc:  # names the file, the row or byte, and the fix
        raise UsageError(f"Dataset {source!r}: {exc}") from None
    if len(data) == 0:
        raise UsageError(
            f"Dataset {source!r} has no problems after the filters (levels={part.get('levels')}, "
            f"subjects={part.get('subjects')}); pass --levels all --subjects all or other values."
        )
    if "side" not in part:
        return data
    try:
        train, test = data.train_test_split(part["test_size"], seed=part["split_seed"])
        if len(train) == 0 or len(test) == 0:
            raise ValueError("empty side")
    except ValueError:
        raise UsageError(
            f"Dataset {source!r} has {len(data)} problem(s); holding {part['test_size']:.0%} out for "
            f"evaluation needs at least 2 distinct problems. Add problems, or pass --eval-dataset "
            f"with separate held-out problems."
        ) from None
    return train if part["side"] == "train" else test


def split_kwargs(env_id: str, env_kwargs: dict[str, Any], side: str) -> dict[str, Any]:
    """``env_kwargs`` for one side of a run (``"train"`` or ``"eval"``) of an env that generates its
    tasks in splits (a ``split`` argument, e.g. the puzzles): ``split="train"`` to train and
    ``split="test"`` to evaluate, unless ``--env-kwargs`` names a split itself."""
    import marft_envs

    if "split" in env_kwargs or not marft_envs.spec(env_id).accepts("split"):
        return dict(env_kwargs)
    return {**env_kwargs, "split": "train" if side == "train" else "test"}
