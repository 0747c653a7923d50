"""Learning-curve plots from metric records (needs matplotlib: ``pip install marft[examples]``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["learning_curve_figure", "plot_learning_curve"]

_ACCURACY_KEYS = ("eval/accuracy", "eval_sampled/accuracy", "rollout/accuracy")


def _points(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[Any], list[Any]]:
    pairs = [(r["iteration"], r[key]) for r in records if isinstance(r.get(key), int | float)]
    return [x for x, _ in pairs], [y for _, y in pairs]


def _names(records: Sequence[Mapping[str, Any]], prefix: str) -> list[str]:
    """The ``<name>`` of every ``<prefix><name>`` key of the records, sorted."""
    return sorted({k.removeprefix(prefix) for r in records for k in r if k.startswith(prefix)})


def learning_curve_figure(
    records: Sequence[Mapping[str, Any]],
    *,
    title: str = "",
    keys: Sequence[str] = _ACCURACY_KEYS,
) -> Any:
    """The learning-curve figure: two panels against the iteration.

    The top panel ("team") has the accuracies ``keys`` and, on a second y-axis, every named reward
    part (``eval/reward/<name>``, else ``rollout/reward/<name>``). The bottom panel ("agents") has
    each agent's reward received (``rollout/reward_mean/<agent>``, solid) and, on a second
    y-axis, its message length (``rollout/action_tokens_mean/<agent>``, dashed). Metrics the
    records lack are skipped.

    Returns:
        The matplotlib ``Figure`` (close it with ``matplotlib.pyplot.close``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (team, agents) = plt.subplots(2, 1, figsize=(6, 7), sharex=True)
    for key in keys:
        xs, ys = _points(records, key)
        if xs:
            team.plot(xs, ys, marker="o" if key.startswith("eval") else None, label=key)
    team.set_ylabel("accuracy")
    team.set_ylim(0, 1)
    team.grid(alpha=0.3)
    team.set_title(title or "team")
    parts_prefix = "eval/reward/" if _names(records, "eval/reward/") else "rollout/reward/"
    parts = _names(records, parts_prefix)
    handles, labels = team.get_legend_handles_labels()
    if parts:
        twin = team.twinx()
        for part in parts:
            xs, ys = _points(records, parts_prefix + part)
            twin.plot(xs, ys, linestyle=":", marker="s", label=parts_prefix + part)
        twin.set_ylabel("reward part (mean per episode)")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    if handles:
        team.legend(handles, labels, fontsize="small")

    names = _names(records, "rollout/reward_mean/")
    lengths = _names(records, "rollout/action_tokens_mean/")
    for agent in names:
        xs, ys = _points(records, "rollout/reward_mean/" + agent)
        agents.plot(xs, ys, label=f"{agent}: reward received")
    agents.set_ylabel("reward received per episode")
    agents.set_xlabel("iteration")
    agents.grid(alpha=0.3)
    agents.set_title("agents")
    handles, labels = agents.get_legend_handles_labels()
    if lengths:
        twin = agents.twinx()
        for agent in lengths:
            xs, ys = _points(records, "rollout/action_tokens_mean/" + agent)
            twin.plot(xs, ys, linestyle="--", label=f"{agent}: message tokens")
        twin.set_ylabel("message length (tokens)")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    if handles:
        agents.legend(handles, labels, fontsize="small")
    fig.tight_layout()
    return fig


def plot_learning_curve(
    records: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    title: str = "",
    keys: Sequence[str] = _ACCURACY_KEYS,
) -> Path:
    """Save :func:`learning_curve_figure` as a PNG.

    Args:
        records: Metric records (``metrics.jsonl`` rows or ``Trainer.train()`` output).
        path: Output PNG path.
        title: Figure title.
        keys: Accuracy metrics to plot; missing ones are skipped.
    """
    import matplotlib.pyplot as plt

    fig = learning_curve_figure(records, title=title, keys=keys)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
