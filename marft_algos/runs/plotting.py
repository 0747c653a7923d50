"""Learning-curve plots from metric records (needs matplotlib: ``pip install marft[examples]``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_learning_curve"]


def plot_learning_curve(
    records: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    title: str = "",
    keys: Sequence[str] = ("eval/accuracy", "eval_sampled/accuracy", "rollout/accuracy"),
) -> Path:
    """Plot ``keys`` against the iteration and save a PNG.

    Args:
        records: Metric records (``metrics.jsonl`` rows or ``Trainer.train()`` output).
        path: Output PNG path.
        title: Figure title.
        keys: Metrics to plot; missing ones are skipped.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key in keys:
        points = [(r["iteration"], r[key]) for r in records if isinstance(r.get(key), int | float)]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o" if key.startswith("eval") else None, label=key)
    ax.set_xlabel("iteration")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
