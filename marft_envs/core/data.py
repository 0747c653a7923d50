"""How a task family names and loads its problems, so that command lines and run records can.

An env class that takes a ``dataset`` argument declares its family's :class:`DataFamily` as the
class attribute ``data_family`` (``MathEnv.data_family`` is :data:`marft_envs.math.data.MATH_DATA`,
``CodeEnv.data_family`` is :data:`marft_envs.code.data.CODE_DATA`). ``marft train --dataset X``
then asks the env's family, never another family's loader, to turn ``X`` into problems, to carve
held-out problems out of a single source, and to apply the filters the family understands
(``--levels`` / ``--subjects`` for math). A new family adds three things::

    MY_DATA = DataFamily(
        name="sudoku",
        load=load_puzzles,                 # load_puzzles(source, **filters) -> dataset
        sources="builtin:train, builtin:test, or a JSONL file of puzzles",
    )

    class SudokuEnv(FlexPOMDPEnv):
        data_family = MY_DATA
        def __init__(self, dataset="builtin:train", ...): ...

The dataset a loader returns must have ``len()`` and ``train_test_split(test_size, seed=...)``
(returning ``(train, test)``); the env must accept that dataset object as its ``dataset``.

A *data plan* (:meth:`DataFamily.plan`) is JSON: for the training and the held-out side, the
source, the filters, and, when the held-out problems are carved out of the training source, the
split that did it. Runs record it; :meth:`DataFamily.load_part` turns one side back into the
same problems.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "HELD_OUT_FRACTION",
    "DataFamily",
    "DataPlanError",
    "data_family_of",
    "held_out_rows",
]

#: Share of a single dataset held out for evaluation when no separate held-out source is given.
HELD_OUT_FRACTION = 0.1


class DataPlanError(ValueError):
    """A data source or filter a user must fix (the message names the value and the fix)."""


@dataclass(frozen=True)
class DataFamily:
    """One task family's data: how its sources are named, loaded, filtered and split.

    Attributes:
        name: The family (``"math"``, ``"code"``), shown in messages.
        load: ``load(source, **filters)`` returning a dataset with ``len()`` and
            ``train_test_split(test_size, seed=...)``.
        sources: One line naming the sources ``load`` accepts (shown in help and errors).
        default_train: Training source when none is given.
        default_eval: Held-out source paired with the default training source.
        filters: Filters ``load`` takes as keyword arguments, each with the converter of one
            comma-separated item (``{"levels": int, "subjects": str}``); command lines offer only
            these.
        builtin_filters: Filter values used for ``builtin`` sources when the user gives none
            (e.g. the demo's easy levels).
        errors: Exceptions ``load`` raises for bad data; they reach the user as
            :class:`DataPlanError` with the source named.
    """

    name: str
    load: Callable[..., Any]
    sources: str
    default_train: str = "builtin:train"
    default_eval: str = "builtin:test"
    filters: Mapping[str, Callable[[str], Any]] = field(default_factory=dict)
    builtin_filters: Mapping[str, Any] = field(default_factory=dict)
    errors: tuple[type[Exception], ...] = ()

    def parse_filters(self, given: Mapping[str, str | None], builtin: bool) -> dict[str, Any]:
        """Filter values from command-line text (``"1,2"``, ``"all"``, None: the default).

        Raises:
            DataPlanError: A filter this family does not take, or an item that does not convert.
        """
        unknown = sorted(k for k, v in given.items() if v is not None and k not in self.filters)
        if unknown:
            flags = ", ".join("--" + k for k in unknown)
            offered = ", ".join("--" + k for k in self.filters) or "none"
            raise DataPlanError(
                f"{flags} does not apply to {self.name} data (its filters: {offered}); drop {flags}."
            )
        out: dict[str, Any] = {}
        for key, convert in self.filters.items():
            text = given.get(key)
            if text is None:
                out[key] = self.builtin_filters.get(key) if builtin else None
            elif text in ("", "all"):
                out[key] = None
            else:
                try:
                    out[key] = [convert(item) for item in text.split(",")]
                except ValueError:
                    raise DataPlanError(
                        f"--{key} {text!r}: write comma-separated {convert.__name__} values, e.g. "
                        f"{'1,2' if convert is int else 'a,b'}, or 'all'."
                    ) from None
        return out

    def plan(
        self,
        dataset: str | None,
        eval_dataset: str | None = None,
        filters: Mapping[str, str | None] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """The data plan of a run: where its training and held-out problems come from."""
        source = dataset or self.default_train
        values = self.parse_filters(dict(filters or {}), source.startswith("builtin"))
        if eval_dataset is not None:
            return {
                "train": {"source": source, **values},
                "eval": {"source": eval_dataset, **values},
            }
        if dataset is None or source.startswith("builtin"):
            return {
                "train": {"source": source, **values},
                "eval": {"source": self.default_eval, **values},
            }
        split = {"test_size": HELD_OUT_FRACTION, "split_seed": 0}
        return {
            "train": {"source": source, **values, **split, "side": "train"},
            "eval": {"source": source, **values, **split, "side": "test"},
        }

    def load_part(self, part: Mapping[str, Any]) -> Any:
        """One side of a data plan as this family's dataset.

        Raises:
            DataPlanError: The source cannot be read, holds no problems, or is too small to hold
                problems out.
        """
        source = part["source"]
        filters = {k: part.get(k) for k in self.filters if part.get(k) is not None}
        try:
            data = self.load(source, **filters)
        except UnicodeDecodeError as exc:
            raise DataPlanError(
                f"Dataset {source!r} is not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r} "
                f"at position {exc.start}); re-save it as UTF-8, e.g. iconv -f latin1 -t utf-8 in > out."
            ) from None
        except self.errors as exc:  # the family's own message names the row or field and the fix
            raise DataPlanError(f"{self.name} dataset {source!r}: {exc}") from None
        if len(data) == 0:
            shown = ", ".join(f"{k}={v}" for k, v in filters.items()) or "none"
            raise DataPlanError(
                f"Dataset {source!r} has no problems after the filters ({shown}); pass other "
                f"filters or 'all'."
            )
        if "side" not in part:
            return data
        try:
            train, test = data.train_test_split(part["test_size"], seed=part["split_seed"])
            if len(train) == 0 or len(test) == 0:
                raise ValueError("empty side")
        except ValueError:
            raise DataPlanError(
                f"Dataset {source!r} has {len(data)} problem(s); holding {part['test_size']:.0%} out "
                f"for evaluation needs at least 2 distinct problems. Add problems, or pass "
                f"--eval-dataset with separate held-out problems."
            ) from None
        return train if part["side"] == "train" else test


def data_family_of(entry_point: Any) -> DataFamily | None:
    """The :class:`DataFamily` an env class (or the class a factory is bound to) declares."""
    family = getattr(entry_point, "data_family", None)
    return family if isinstance(family, DataFamily) else None


def held_out_rows(texts: Sequence[str], test_size: float | int, *, seed: int) -> set[int]:
    """The rows a seeded train/test split holds out, with no text on both sides.

    Rows sharing the same text form one group that goes wholly to one side, so ``test_size``
    counts groups: a fraction in (0, 1) of them, or a number in ``[1, groups)``.

    Raises:
        ValueError: ``test_size`` leaves a side empty.
    """
    groups: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        groups.setdefault(text, []).append(i)
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
    return {i for k in order[:n_test] for i in groups[keys[k]]}
