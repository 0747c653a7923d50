"""``marft eval``: held-out accuracy of a run or checkpoint, with every setting read from the run.

The env id and its arguments, the data plan, the model, the LoRA settings, the generation settings,
the number of held-out episodes, the batch (env copies) and the torch thread count all come from
the checkpoint's manifest, so on a finished run this reproduces the run's final ``eval/accuracy``
exactly. Flags override them, e.g. ``--dataset math500.jsonl`` for other problems.

The untuned team (adapters off) runs on the same episodes for the paired before → after line, and
``--attribution`` adds every agent alone reverted and alone tuned
(:mod:`marft_algos.rollout.attribution`).

Held-out episodes whose agent program failed (raised, timed out, was dropped) get the console line
and the ``program_errors.jsonl`` transcripts training gives its failures
(:func:`~marft_algos.trainers.failures.report_failures`); the reward means are over the finished
episodes, with ``eval/episodes_failed`` and the counts by kind beside them.

The parts live by concept: finding the checkpoint (:mod:`~marft_algos.cli.eval_checkpoints`), the
held-out env and its tasks (:mod:`~marft_algos.cli.eval_tasks`), the printing
(:mod:`~marft_algos.cli.eval_report`) and the attribution table
(:mod:`~marft_algos.cli.eval_attribution`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from marft_algos.cli.eval_attribution import ATTRIBUTION_FILE, print_attribution, save_attribution
from marft_algos.cli.eval_checkpoints import find_checkpoint, open_checkpoint, run_device_and_dtype
from marft_algos.cli.eval_report import print_headline, print_metrics
from marft_algos.cli.eval_tasks import held_out_env, recorded_env_kwargs
from marft_algos.cli.eval_traces import TraceArguments, traced_reports
from marft_algos.cli.parsing import UsageError, parse_run_command
from marft_algos.cli.program_failures import reporting_program_failures

__all__ = [
    "ATTRIBUTION_FILE",
    "EvalArguments",
    "evaluate_checkpoint",
    "find_checkpoint",
    "main",
    "open_checkpoint",
    "run_device_and_dtype",
]

#: The earlier private name of :func:`~marft_algos.cli.eval_tasks.recorded_env_kwargs`.
_recorded_env_kwargs = recorded_env_kwargs

#: Reports a split's failed held-out episodes (its episodes, the split's name).
ReportFailures = Callable[[Sequence[Any], str], None]


@dataclass
class EvalArguments(TraceArguments):
    """Overrides of what the run recorded (all optional), and where traces go."""

    json: str | None = None
    """Write the metrics as a JSON object to this file ('-': standard output)."""
    env: str | None = None
    """Evaluate on another env id (default: the run's)."""
    dataset: str | None = None
    """Held-out problems instead of the run's, e.g. builtin:test or math500.jsonl."""
    levels: str | None = None
    """With --dataset: keep only these levels, e.g. 1,2, or 'all'."""
    subjects: str | None = None
    """With --dataset: keep only these subjects, or 'all'."""
    episodes: int | None = None
    """Held-out episodes (default: the run's eval_episodes)."""
    samples: int = 0
    """Print this many whole transcripts (every agent's system prompt once, observations, actions,
    rewards, and the env's final info with its reward parts)."""
    show_system: bool = False
    """With --samples: print each agent's system prompt at every turn, not only the first time."""
    before: bool = True
    """Also evaluate the untuned team (adapters off: the team before training) on the same
    episodes and print the paired before → after line (--no-before: the checkpoint alone; the
    vLLM backend evaluates the checkpoint alone)."""
    attribution: bool = False
    """Also run every agent alone reverted to untuned and alone tuned (2n + 2 settings) and print
    each setting's accuracy and reward with its paired difference to all tuned."""
    attribution_sampled: bool = False
    """With --attribution: also compare the settings with the run's sampling, not only greedy."""
    batch: int | None = None
    """Env copies generated together (default: the run's rollout_threads, which reproduces its numbers)."""
    model: str | None = None
    """Base model path replacing the recorded one (same model, moved)."""
    threads: int | None = None
    """Torch CPU threads (default: the run's)."""
    device: str | None = None
    """Torch device (default: cuda if the run trained on a GPU and one is here, else cpu)."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """Weight dtype (default: the run's, which reproduces its numbers)."""
    rollout_backend: Literal["transformers", "vllm"] = "transformers"
    """Generate with the policy (transformers) or one vLLM engine serving every agent's adapter."""

    def __post_init__(self) -> None:
        if self.samples < 0:
            raise UsageError(f"--samples {self.samples}: must be >= 0 (0: no transcripts).")
        for name in ("episodes", "batch", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name} {value}: must be >= 1.")
        if self.device is not None:
            from marft_algos.distributed import parse_device

            parse_device(self.device)


def evaluate_checkpoint(
    checkpoint: str | Path, overrides: EvalArguments | None = None
) -> dict[str, Any]:
    """Greedy held-out metrics of a checkpoint, every setting read from it unless overridden.

    Returns:
        ``eval/...`` metrics of the checkpoint; with ``before``, ``before/...`` of the untuned
        team and ``paired/...`` (:meth:`~marft_algos.rollout.paired.PairedComparison.as_dict`);
        with ``attribution``, ``attribution`` (``{"greedy": rows, "sampled": rows}``, rows of
        :func:`~marft_algos.rollout.attribution.attribution_rows`); with ``samples``, ``samples``
        (transcripts).
    """
    import torch

    from marft_algos.policy.rendering import fill_chat_template
    from marft_algos.rollout.attribution import SettingsPolicy
    from marft_algos.rollout.collector import GenerationSettings, RolloutCollector
    from marft_algos.rollout.evaluation import evaluation_requests, greedy
    from marft_algos.runs.checkpoint import policy_from_checkpoint, read_manifest, read_state

    o = overrides or EvalArguments()
    manifest = read_manifest(checkpoint)
    run = manifest.get("run") or {}
    state = read_state(checkpoint)
    config = state.get("config", {})
    filters = {"levels": o.levels, "subjects": o.subjects}
    env_id, env_fn = held_out_env(checkpoint, manifest, o.env, o.dataset, filters)
    torch.set_num_threads(o.threads or int(run.get("threads") or 1))
    device, dtype = run_device_and_dtype(run, o.device, o.dtype)
    attn = run.get("attn_implementation")  # the run's attention kernel, as it trained
    policy = policy_from_checkpoint(
        str(checkpoint),
        model=o.model,
        device=device,
        torch_dtype=getattr(torch, dtype),
        model_kwargs={"attn_implementation": attn} if attn else None,
    )
    fill_chat_template(policy, run.get("chat_template"))
    recorded = dict(run.get("generation") or {})
    if not recorded:
        raise UsageError(
            f"{checkpoint} does not record its generation settings (an older checkpoint)."
        )
    sampling = GenerationSettings(**recorded)
    settings = greedy(sampling)
    batch = o.batch or int(config.get("rollout_threads", 1))
    seed = int(config.get("seed", 0))
    generator: Any = SettingsPolicy(policy)
    if o.rollout_backend == "vllm":
        from marft_algos.rollout.vllm import VLLMRolloutBackend

        if o.attribution:
            raise UsageError(
                "--attribution turns adapters off per agent, which the vLLM backend does not do; "
                "leave --rollout-backend at transformers."
            )
        generator = VLLMRolloutBackend(policy)
    iteration, tracer = int(state.get("iteration", 0)), o.tracer()
    failures = _failure_reporter(Path(checkpoint), iteration)
    report = traced_reports(failures, tracer, iteration, env_id)
    try:
        collector = RolloutCollector.from_factory(generator, env_fn, batch, settings, seed=seed)
        requests = evaluation_requests(
            collector, o.episodes or int(config.get("eval_episodes", 64))
        )
        if isinstance(generator, SettingsPolicy):
            metrics = _evaluate_settings(
                generator, collector, requests, settings, sampling, seed, o, report
            )
        else:
            metrics = _summaries(collector.collect(requests, settings), None, o, report)
    finally:
        tracer.close()  # exports the spans still queued
        if not isinstance(generator, SettingsPolicy):
            generator.close()
    return metrics


def _failure_reporter(checkpoint: Path, iteration: int) -> ReportFailures:
    """Report a split's failed episodes as training does: one console line, and their transcripts
    appended to the run folder's ``program_errors.jsonl`` (rows marked with the split, the
    checkpoint and ``"command": "marft eval"``)."""
    from marft_algos.distributed import DistributedContext
    from marft_algos.trainers.failures import report_failures

    def report(episodes: Sequence[Any], split: str) -> None:
        when = f"marft eval of {checkpoint.name} ({split})"
        what = f"counted wrong in {split}/accuracy, left out of {split}/reward_mean"
        fields = {"command": "marft eval", "checkpoint": checkpoint.name}
        report_failures(
            episodes, when, what, checkpoint.parent, DistributedContext(), iteration, split, fields
        )

    return report


def _evaluate_settings(
    policy: Any,
    collector: Any,
    requests: Sequence[Any],
    greedy_settings: Any,
    sampling: Any,
    seed: int,
    o: EvalArguments,
    report: ReportFailures,
) -> dict[str, Any]:
    """The checkpoint's episodes and, as asked, the untuned team's and the attribution settings'
    (greedy generations reused across settings, see :mod:`marft_algos.rollout.attribution`)."""
    import torch

    from marft_algos.rollout.attribution import (
        attribution_rows,
        attribution_settings,
        collect_settings,
    )

    agents = [a for a in policy.agents if policy.is_trainable(a)]  # a frozen agent never moved
    everyone = frozenset(agents)
    if o.attribution:
        chosen = attribution_settings(agents)
    else:
        chosen = attribution_settings(agents)[: 2 if o.before else 1]

    def run(settings: Any) -> Any:
        def collect() -> list[Any]:
            collector.generator = torch.Generator().manual_seed(seed)  # the same seeds per setting
            return collector.collect(requests, settings)

        return collect

    episodes = collect_settings(policy, run(greedy_settings), chosen)
    untuned = episodes.get(everyone) if o.before else None
    metrics = _summaries(episodes[frozenset()], untuned, o, report)
    if o.attribution:
        metrics["attribution"] = {"greedy": attribution_rows(chosen, episodes)}
        if o.attribution_sampled:
            sampled = collect_settings(policy, run(sampling), chosen)
            metrics["attribution"]["sampled"] = attribution_rows(chosen, sampled)
        metrics["attribution"]["generations"] = {"run": policy.generated, "reused": policy.reused}
    return metrics


def _summaries(
    tuned: Sequence[Any],
    untuned: Sequence[Any] | None,
    o: EvalArguments,
    report: ReportFailures,
) -> dict[str, Any]:
    """``eval/...`` of the checkpoint's episodes, ``before/...`` and ``paired/...`` with the
    untuned team's, and the transcripts; each team's failed episodes reported."""
    from marft_algos.rollout.evaluation import episode_outcomes, summarize_episodes
    from marft_algos.rollout.paired import paired_outcomes

    metrics = summarize_episodes(tuned, "eval")
    report(tuned, "eval")
    if untuned is not None:
        report(untuned, "before")
        before = summarize_episodes(untuned, "before")
        kept = (k for k in before if k.count("/") == 1 or k.startswith("before/program_errors/"))
        metrics.update({k: before[k] for k in kept})
        comparison = paired_outcomes(episode_outcomes(untuned), episode_outcomes(tuned))
        if comparison is not None:
            metrics.update(comparison.as_dict("paired"))
    if o.samples:
        from marft_algos.runs.samples import episode_transcript

        metrics["samples"] = [
            episode_transcript(e, i, split="eval") for i, e in enumerate(tuned[: o.samples])
        ]
    return metrics


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run ``marft eval RUN_OR_CHECKPOINT``; returns the metrics."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, values = parse_run_command(
        EvalArguments,
        argv,
        prog="marft eval",
        description="Greedy held-out accuracy of a trained team, settings read from the run.",
    )
    if args.rollout_backend == "vllm":
        from marft_algos.rollout.vllm import import_vllm

        import_vllm()  # a missing engine is one line with the install command
    with (
        open_checkpoint(values["run"]) as checkpoint,
        reporting_program_failures(checkpoint.parent),
    ):
        metrics = evaluate_checkpoint(checkpoint, args)
    text = json.dumps(metrics, indent=2, default=repr)
    saved = save_attribution(checkpoint, metrics) if "attribution" in metrics else None
    if args.json == "-":
        sys.stdout.write(text + "\n")
        return metrics
    if args.json is not None:
        Path(args.json).write_text(text + "\n")
    from rich.console import Console

    console = Console()
    print_metrics(console, checkpoint, metrics, show_system=args.show_system)
    if saved is not None:
        print_attribution(console, metrics, saved)
    print_headline(console, metrics)
    return metrics
