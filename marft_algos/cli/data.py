"""Where a command-line run's problems come from, recorded so that ``marft eval`` reloads them.

A *data plan* is JSON: for the training and the held-out side, the source (``builtin:train``, a
file, ``hf:<name>``), the level and subject filters, and, when the held-out problems are carved
out of the training source, the split that did it. A file is recorded by its absolute path and
the SHA-256 of its bytes, so ``marft eval RUN`` from another directory reads the same file, and
a file changed since the run refuses to load instead of silently grading other problems. The
plan goes into ``config.json`` and every checkpoint; :func:`load_part` turns one side back into
the same :class:`MathDataset`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from marft_algos.cli.parsing import UsageError
from marft_algos.cli.presets import DEMO_DATA

__all__ = ["HELD_OUT_FRACTION", "load_part", "plan_data"]

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


def _pinned(source: str) -> dict[str, Any]:
    """A local file as its absolute path and content hash; any other source as given."""
    from marft_algos.run_dir import file_sha256

    path = Path(source).expanduser()
    if source.startswith(("builtin", "hf:")) or not path.is_file():
        return {"source": source}
    return {"source": str(path.resolve()), "sha256": file_sha256(path)}


def plan_data(
    dataset: str | None, eval_dataset: str | None, levels: str | None, subjects: str | None
) -> dict[str, dict[str, Any]]:
    """The data plan of a run (see the module notes)."""
    source = dataset or "builtin:train"
    filters = _filters(source, levels, subjects)
    if eval_dataset is not None:
        return {
            "train": {**_pinned(source), **filters},
            "eval": {**_pinned(eval_dataset), **filters},
        }
    if source.startswith("builtin"):
        return {
            "train": {"source": source, **filters},
            "eval": {"source": "builtin:test", **filters},
        }
    split = {"test_size": HELD_OUT_FRACTION, "split_seed": 0}
    return {
        "train": {**_pinned(source), **filters, **split, "side": "train"},
        "eval": {**_pinned(source), **filters, **split, "side": "test"},
    }


def load_part(part: dict[str, Any]) -> Any:
    """One side of a data plan as a :class:`~marft_envs.math.data.MathDataset`.

    Raises:
        UsageError: The source cannot be read as text, is too small to hold problems out, or is a
            file whose bytes differ from the hash the run recorded.
    """
    recorded = part.get("sha256")
    if recorded is not None:
        from marft_algos.run_dir import file_sha256

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
