"""Training progress: what the run is doing now, how fast, and when it will end.

With a real model one iteration or evaluation takes minutes, so the display shows the phase
(``rollout``, ``update``, ``eval``), the episodes of that phase done so far, the generated tokens
per second and an ETA for the whole run, the evaluations still to come included:

- ``"rich"``: two live bars on a terminal (the run's iterations with the ETA; the phase's episodes
  with tokens/s);
- ``"plain"``: lines for logs and pipes: one per iteration with the metrics, the rollout's
  tokens/s and the ETA, and for a phase that runs longer than ``slow_phase_s`` (a real model's
  rollout or evaluation) a line at each quarter of its episodes and at its end. They go to the
  ``marft_algos.runs.progress``
  logger when logging is configured to show them (the command line does), else to standard error,
  so ``trainer.train(progress=True)`` from a script or notebook shows them too;
- ``"auto"`` (and ``True``): rich on a terminal, plain otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from marft_algos.rollout.evaluation import format_accuracy

__all__ = ["TrainingProgress", "format_duration"]

progress_logger = logging.getLogger("marft_algos.runs.progress")
"""The plain lines (CI logs, files), at INFO."""


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class TrainingProgress:
    """Progress of a training run in ``"rich"``, ``"plain"`` or ``"off"`` mode (see the module notes).

    Args:
        mode: ``True``/``"auto"``, ``"rich"``, ``"plain"``, or ``False``/``"off"``.
        total: Iterations of the whole run.
        done: Iterations already done (a resumed run).
        slow_phase_s: In plain mode, phases running longer than this get their own lines.
        eval_every: The run's evaluation schedule (``config.eval_every``; 0: at the end only), so
            the ETA adds the evaluations still to come at the measured time of one; ``None``: the
            run does not evaluate.
        clock: Seconds since some origin (tests pass a fake clock).
    """

    KEYS = ("rollout/reward_mean", "eval/accuracy", "train/policy_loss", "train/entropy")

    def __init__(
        self,
        mode: bool | str,
        total: int,
        done: int,
        *,
        slow_phase_s: float = 10.0,
        eval_every: int | None = None,
        clock: Any = time.perf_counter,
    ) -> None:
        if mode is True or mode == "auto":
            mode = "rich" if sys.stderr.isatty() else "plain"
        self.mode = mode or "off"
        if self.mode not in ("rich", "plain", "off"):
            raise ValueError(
                f"progress must be True, False, 'rich', 'plain' or 'auto', got {mode!r}."
            )
        self.enabled = self.mode == "rich"
        self.total, self.done = total, done
        self._first_done = done
        self._clock = clock
        self._started = clock()
        self._progress: Any = None
        self._phase: str | None = None
        self._phase_total = 0
        self._episodes = 0
        self._tokens = 0
        self._generation_s: float | None = None  # the phase's episodes came from another process
        self._phase_started = self._started
        self._quarter = 0
        self._slow = slow_phase_s
        self._rollout_rate = float("nan")
        self._eval_every = eval_every
        self._eval_since_start = 0.0  # seconds in evaluation phases since the pace's origin
        self._eval_seconds = 0.0  # ...and in every evaluation of this session
        self._evaluations = 0
        self._evaluated = False  # an evaluation phase ran since the last update

    # ------------------------------------------------------------------ output
    def _line(self, text: str, *args: Any) -> None:
        if self.mode != "plain":
            return
        if progress_logger.isEnabledFor(logging.INFO) and progress_logger.hasHandlers():
            progress_logger.info(text, *args)
        else:  # logging not set up to show INFO: the user still asked for progress
            sys.stderr.write((text % args) + "\n")
            sys.stderr.flush()

    def __enter__(self) -> TrainingProgress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                "training", total=self.total, completed=self.done, info=""
            )
            self._phase_task = self._progress.add_task("", total=None, info="", visible=False)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    # ------------------------------------------------------------------ rates
    def eta_seconds(self) -> float:
        """Seconds left for the run: the iterations left at the pace of those done in this session
        (evaluations taken out), plus the evaluations left at the measured time of one."""
        finished = self.done - self._first_done
        if finished <= 0:
            return float("nan")
        training = self._clock() - self._started - self._eval_since_start
        per_evaluation = self._eval_seconds / self._evaluations if self._evaluations else 0.0
        return (
            training / finished * (self.total - self.done)
            + per_evaluation * self.evaluations_left()
        )

    def evaluations_left(self) -> int:
        """Evaluations still to come: every ``eval_every`` iterations and at the end."""
        every = self._eval_every
        if every is None:
            return 0
        return sum(
            1
            for i in range(self.done + 1, self.total + 1)
            if (every and i % every == 0) or i == self.total
        )

    def tokens_per_second(self) -> float:
        elapsed = self._clock() - self._phase_started
        if self._generation_s is not None:
            elapsed = self._generation_s
        return self._tokens / elapsed if elapsed > 0 else float("nan")

    def _phase_info(self) -> str:
        rate = self.tokens_per_second()
        shown = f"{rate:.0f} tokens/s" if math.isfinite(rate) else "- tokens/s"
        return f"{shown}, iteration {min(self.done + 1, self.total)}/{self.total}"

    # ------------------------------------------------------------------ events
    def phase(self, name: str, episodes: int | None = None) -> None:
        """A phase of the current iteration begins (``rollout``, ``update``, ``eval``, ...)."""
        self._end_phase()
        self._phase, self._phase_total = name, int(episodes or 0)
        self._episodes = self._tokens = self._quarter = 0
        self._generation_s = None
        self._phase_started = self._clock()
        if self._progress is not None:
            self._progress.update(
                self._phase_task,
                description=name,
                total=episodes or None,
                completed=0,
                info=self._phase_info(),
                visible=True,
            )

    @contextlib.contextmanager
    def counting(self, collectors: Iterable[Any]) -> Iterator[None]:
        """Count every episode the collectors finish (and its tokens) while the block runs."""
        chosen = list(collectors)

        def done(episode: Any) -> None:
            self.episode(sum(len(d.action_ids) for d in episode.decisions))

        for collector in chosen:
            collector.on_episode = done
        try:
            yield
        finally:
            for collector in chosen:
                collector.on_episode = None

    def generated_elsewhere(self, episodes: Iterable[Any], seconds: float | None) -> None:
        """The current phase's episodes, generated by another process (the asynchronous rollout
        worker) in ``seconds``: their tokens over the worker's time are the phase's tokens/s
        (``seconds=None``: over the phase's own time)."""
        self._generation_s = seconds
        for episode in episodes:
            self.episode(sum(len(d.action_ids) for d in episode.decisions))

    def episode(self, tokens: int) -> None:
        """An episode of the current phase finished, having generated ``tokens`` tokens."""
        self._episodes += 1
        self._tokens += int(tokens)
        if self._progress is not None:
            self._progress.update(self._phase_task, advance=1, info=self._phase_info())
        total = self._phase_total
        slow = self._clock() - self._phase_started >= self._slow
        if total and self._episodes < total:
            quarter = 4 * self._episodes // total
            if quarter > self._quarter and slow:
                self._quarter = quarter
                self._line(
                    "  %s %d/%d episodes, %.0f tokens/s",
                    self._phase,
                    self._episodes,
                    total,
                    self.tokens_per_second(),
                )

    def _end_phase(self) -> None:
        if self._phase is None:
            return
        took = self._clock() - self._phase_started
        if self._phase == "rollout":
            self._rollout_rate = self.tokens_per_second()
        if self._phase.startswith("eval"):  # "eval" and "eval (sampled)": one evaluation
            self._eval_since_start += took
            self._eval_seconds += took
            self._evaluated = True
        if took >= self._slow and self._episodes:
            self._line(
                "  %s done: %d episodes, %d tokens in %s (%.0f tokens/s)",
                self._phase,
                self._episodes,
                self._tokens,
                format_duration(took),
                self.tokens_per_second(),
            )
        elif took >= self._slow:
            self._line("  %s done in %s", self._phase, format_duration(took))
        self._phase = None

    def update(self, metrics: Mapping[str, Any], *, advance: bool = True) -> None:
        """An iteration (or the initial evaluation, ``advance=False``) finished with ``metrics``."""
        self._end_phase()
        shown = " ".join(self._format(k, metrics) for k in self.KEYS if k in metrics)
        self.done += int(advance)
        self._evaluations += int(self._evaluated)
        self._evaluated = False
        if not advance:  # the initial evaluation does not set the pace of iterations
            self._started = self._clock()
            self._eval_since_start = 0.0
        eta = self.eta_seconds()
        timing = _failed(metrics)
        if advance and math.isfinite(self._rollout_rate):
            timing += f" | rollout {self._rollout_rate:.0f} tokens/s"
        timing += _split(metrics) if advance else ""
        if advance and math.isfinite(eta):
            timing += f" | ETA {format_duration(eta)}"
        self._line("iteration %d/%d %s%s", self.done, self.total, shown, timing)
        if self._progress is None:
            return
        self._progress.update(self._task, info=shown + timing, advance=1 if advance else 0)
        self._progress.update(self._phase_task, visible=False)

    @staticmethod
    def _format(key: str, metrics: Mapping[str, Any]) -> str:
        value = metrics[key]
        name = key.split("/")[-1]
        if not isinstance(value, int | float):
            return f"{name}={value}"
        if key.endswith("/accuracy"):
            n = metrics.get(key.rsplit("/", 1)[0] + "/episodes")
            return f"{name}={format_accuracy(value, n if isinstance(n, int) else None)}"
        return f"{name}={value:.3f}"


def _failed(metrics: Mapping[str, Any]) -> str:
    """`` | failed: rollout 12 of 64 (Timeout 9, ValueError 3), eval 3 of 40 (Timeout 3)``: the
    failed episodes, which the reward means leave out."""
    parts = []
    for prefix in ("rollout", "eval", "eval_sampled"):
        failed, n = metrics.get(f"{prefix}/program_errors"), metrics.get(f"{prefix}/episodes")
        if not isinstance(failed, int | float) or not failed or not isinstance(n, int | float):
            continue
        kinds = sorted(
            (
                (k.rsplit("/", 1)[1], v)
                for k, v in metrics.items()
                if k.startswith(f"{prefix}/program_errors/")
            ),
            key=lambda kv: -kv[1],
        )
        detail = ", ".join(f"{kind} {count:g}" for kind, count in kinds)
        parts.append(f"{prefix} {failed:g} of {n:g}" + (f" ({detail})" if detail else ""))
    return f" | failed: {', '.join(parts)}" if parts else ""


def _split(metrics: Mapping[str, Any]) -> str:
    """`` | rollout 12s, update 30s | prompts 64% saved`` from an iteration's metrics."""
    text = ""
    rollout, update = metrics.get("time/rollout_s"), metrics.get("time/update_s")
    if isinstance(rollout, int | float) and isinstance(update, int | float):
        text += f" | rollout {format_duration(rollout)}, update {format_duration(update)}"
    tokens = metrics.get("rollout/prefill_tokens")
    saved = metrics.get("rollout/prefill_tokens_saved")
    if isinstance(tokens, int) and isinstance(saved, int) and tokens + saved:
        text += f" | prompts {saved / (tokens + saved):.0%} saved"
    return text
