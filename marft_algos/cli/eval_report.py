"""What ``marft eval`` prints: the transcripts asked for, the metrics table, and the headline
(accuracy, or the untuned team's before → after with the paired comparison, and the failed
episodes beside the reward mean of the finished ones)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["failures_line", "print_headline", "print_metrics"]


def print_metrics(
    console: Any, checkpoint: Path, metrics: Mapping[str, Any], show_system: bool = False
) -> None:
    """The transcripts (``metrics["samples"]``) and a table of every number."""
    from rich.table import Table

    samples = metrics.get("samples", [])
    if samples:
        from marft_algos.runs.samples import print_transcripts

        print_transcripts(console, samples, show_system=show_system)
    table = Table(title=f"{checkpoint} ({metrics['eval/episodes']} held-out episodes, greedy)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if isinstance(value, int | float | str):
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    console.print(table)


def print_headline(console: Any, metrics: Mapping[str, Any]) -> None:
    """``accuracy ...`` or, with the untuned team evaluated, the before → after lines; then each
    team's failed episodes beside the reward mean of its finished ones."""
    from marft_algos.rollout.evaluation import format_accuracy, format_change
    from marft_algos.rollout.paired import PairedComparison, format_paired

    accuracy, n = metrics.get("eval/accuracy"), metrics.get("eval/episodes")
    if not isinstance(accuracy, int | float):
        return
    before, n_before = metrics.get("before/accuracy"), metrics.get("before/episodes")
    if not isinstance(before, int | float):
        console.print(f"accuracy {format_accuracy(accuracy, n)}")
    else:
        console.print(
            f"accuracy before (untuned) {format_accuracy(before, n_before)} → after "
            f"{format_accuracy(accuracy, n)} ({format_change(before, n_before, accuracy, n)})"
        )
    fields = {k.removeprefix("paired/"): v for k, v in metrics.items() if k.startswith("paired/")}
    if fields:
        console.print(f"  same episodes: {format_paired(PairedComparison(**fields))}")
    for prefix, team in (("eval", "tuned"), ("before", "untuned")):
        line = failures_line(metrics, prefix)
        if line:
            console.print(f"  {team}: {line}")


def failures_line(metrics: Mapping[str, Any], prefix: str) -> str | None:
    """``reward mean -0.150 over 37 finished episodes; 3 of 40 failed (Timeout 2, ValueError 1)``
    when some of ``prefix``'s episodes failed, else None."""
    failed, n = metrics.get(f"{prefix}/program_errors"), metrics.get(f"{prefix}/episodes")
    if not isinstance(failed, int | float) or not isinstance(n, int | float) or not failed:
        return None
    kinds = sorted(
        (
            (k.rsplit("/", 1)[1], v)
            for k, v in metrics.items()
            if k.startswith(f"{prefix}/program_errors/")
        ),
        key=lambda kv: -kv[1],
    )
    detail = ", ".join(f"{kind} {count:g}" for kind, count in kinds)
    reward = metrics.get(f"{prefix}/reward_mean")
    mean = (
        f"reward mean {reward:.3f} over {n - failed:g} finished episodes"
        if isinstance(reward, int | float)
        else "no episode finished"
    )
    return f"{mean}; {failed:g} of {n:g} failed" + (f" ({detail})" if detail else "")
