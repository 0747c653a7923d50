"""What ``marft train`` prints and saves when a run ends: the held-out table with the before →
after comparison, a few transcripts, the learning curve."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

__all__ = ["plot_curve", "show_samples", "summarize"]

logger = logging.getLogger(__name__)


def plot_curve(console: Any, records: list[dict[str, Any]], output_dir: str, title: str) -> None:
    """Save the learning curve; matplotlib missing is one warning line, never a failed run (the
    work is done and every number is in metrics.jsonl)."""
    from marft_algos.runs.plotting import plot_learning_curve

    try:
        path = plot_learning_curve(records, Path(output_dir) / "learning_curve.png", title=title)
    except ImportError as exc:
        logger.warning(
            "No learning_curve.png: %s is not installed (pip install matplotlib, or pass "
            "--no-plot); the numbers are in %s.",
            exc.name or "matplotlib",
            Path(output_dir) / "metrics.jsonl",
        )
        return
    console.print(f"learning curve: {path}")


def summarize(console: Any, evals: list[dict[str, Any]], config: Any) -> dict[str, Any]:
    """The held-out table and the before → after lines (the whole run, also after a resume), each
    accuracy with its binomial standard error and episode count, and the paired comparison of the
    same episodes (``eval_outcomes.jsonl``); returns the paired comparisons by prefix."""
    from rich.table import Table

    from marft_algos.rollout.evaluation import format_accuracy, format_change
    from marft_algos.rollout.paired import format_paired
    from marft_algos.runs.outcomes import paired_before_after

    sampled = any("eval_sampled/accuracy" in r for r in evals)
    table = Table(title="held-out accuracy (± standard error, n episodes)")
    table.add_column("iteration", justify="right")
    table.add_column("greedy", justify="right")
    if sampled:
        table.add_column(f"sampled (T={config.temperature:g})", justify="right")
    # Named reward parts (agent programs, or an env's info["reward_parts"]): one column each.
    parts = sorted({k for r in evals for k in r if k.startswith("eval/reward/")})
    for key in parts:
        table.add_column(key.removeprefix("eval/"), justify="right")
    # Agent programs: the mean return of the finished episodes, and the failed ones beside it.
    failures = any("eval/episodes_failed" in r for r in evals)
    if failures:
        table.add_column("reward_mean (finished)", justify="right")
        table.add_column("failed", justify="right")

    def cell(record: dict[str, Any], prefix: str) -> str:
        value = record.get(f"{prefix}/accuracy")
        if not isinstance(value, int | float):
            return ""
        return format_accuracy(value, record.get(f"{prefix}/episodes"))

    for r in evals:
        row = [str(r["iteration"]), cell(r, "eval")]
        if sampled:
            row.append(cell(r, "eval_sampled"))
        row += [f"{r[k]:.3f}" if isinstance(r.get(k), int | float) else "" for k in parts]
        if failures:
            reward = r.get("eval/reward_mean")
            row += [f"{reward:.3f}" if isinstance(reward, int | float) else "", _failed_cell(r)]
        table.add_row(*row)
    console.print(table)
    paired: dict[str, Any] = {}
    if len(evals) >= 2:
        for prefix, name in (("eval", "greedy"), ("eval_sampled", "sampled")):
            first, last = evals[0], evals[-1]
            a, b = first.get(f"{prefix}/accuracy"), last.get(f"{prefix}/accuracy")
            if isinstance(a, int | float) and isinstance(b, int | float):
                na, nb = first.get(f"{prefix}/episodes"), last.get(f"{prefix}/episodes")
                console.print(
                    f"{name} accuracy before {format_accuracy(a, na)} → after "
                    f"{format_accuracy(b, nb)} ({format_change(a, na, b, nb)})"
                )
                comparison = paired_before_after(
                    config.output_dir, first["iteration"], last["iteration"], prefix
                )
                if comparison is not None:
                    paired[prefix] = comparison.as_dict(prefix)
                    console.print(f"  same episodes: {format_paired(comparison)}")
    return paired


def _failed_cell(record: dict[str, Any]) -> str:
    """``3 of 40 (Timeout 2, ValueError 1)``: the evaluation's failed episodes by kind."""
    failed, n = record.get("eval/program_errors"), record.get("eval/episodes")
    if not isinstance(failed, int | float) or not isinstance(n, int | float):
        return ""
    kinds = [
        (k.rsplit("/", 1)[1], v) for k, v in record.items() if k.startswith("eval/program_errors/")
    ]
    detail = ", ".join(f"{kind} {count:g}" for kind, count in sorted(kinds, key=lambda kv: -kv[1]))
    return f"{failed:g} of {n:g}" + (f" ({detail})" if detail else "")


def show_samples(console: Any, output_dir: str, count: int) -> None:
    """The last evaluation's transcripts (samples.jsonl) as a short table."""
    from marft_algos.runs.samples import SAMPLES_FILE, read_samples, transcript_table

    rows = read_samples(output_dir)
    if not rows or count <= 0:
        return
    last = max(r.get("iteration", 0) for r in rows)
    shown = [r for r in rows if r.get("iteration", 0) == last][:count]
    console.print(
        transcript_table(
            shown,
            title=f"held-out samples at iteration {last} ({Path(output_dir) / SAMPLES_FILE}; "
            f"marft eval RUN --samples N prints whole transcripts)",
        )
    )
