"""``marft eval``: held-out accuracy of a run or checkpoint, with every setting read from the run.

The env id and its arguments, the data plan, the model, the LoRA settings, the generation settings,
the number of held-out episodes, the batch (env copies) and the torch thread count all come from
the checkpoint's manifest, so on a finished run this reproduces the run's final ``eval/accuracy``
exactly. Flags override them, e.g. ``--dataset math500.jsonl`` for other problems.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from marft_algos.cli.data import family_of, load_part, plan_data, split_kwargs
from marft_algos.cli.parsing import UsageError, parse_run_command

__all__ = ["EvalArguments", "evaluate_checkpoint", "find_checkpoint", "main", "open_checkpoint"]

logger = logging.getLogger(__name__)


@dataclass
class EvalArguments:
    """Overrides of what the run recorded (all optional)."""

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
    """Print this many whole transcripts (every agent's observation, action and reward)."""
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


def find_checkpoint(path: str | Path) -> Path:
    """The checkpoint itself, or a run folder's newest checkpoint that verifies (damaged newer
    ones are skipped with a warning naming them)."""
    from marft_algos.runs.checkpoint import newest_valid_checkpoint
    from marft_algos.runs.folder import is_complete_checkpoint

    folder = Path(path)
    if not folder.exists():
        raise UsageError(
            f"{str(folder)!r} does not exist; pass a run folder (--output-dir of marft train) or a checkpoint-N folder."
        )
    if is_complete_checkpoint(folder):
        return folder
    latest, skipped = newest_valid_checkpoint(folder)
    if latest is None and skipped:
        raise UsageError(
            f"No checkpoint in {str(folder)!r} verifies ({'; '.join(skipped)}); evaluate another run "
            f"or restore the folder from a backup."
        )
    if latest is None:
        raise UsageError(
            f"{str(folder)!r} is neither a checkpoint nor a run folder with one (no checkpoint-N with a "
            f"manifest.json inside); pass the --output-dir of a marft train run or one of its checkpoints."
        )
    _check_belongs_to_run(folder, latest)
    return latest


def _check_belongs_to_run(folder: Path, checkpoint: Path) -> None:
    """Refuse a run folder's checkpoint that another run wrote (copied in), as --resume does.

    The checkpoint's config must agree with the folder's ``config.json`` on every field that
    makes a different run (:data:`~marft_algos.runs.folder.RESUMABLE_CHANGES` may differ), and on
    the env and model.
    """
    from marft_algos.runs.checkpoint import read_manifest, read_state
    from marft_algos.runs.folder import RESUMABLE_CHANGES, RunDirectory

    try:
        recorded = RunDirectory(folder).read_config()
    except (OSError, ValueError):
        return  # an unreadable config.json is no evidence either way
    if not isinstance(recorded, dict):
        return
    saved = read_state(checkpoint).get("config", {})
    changed = {
        k: (recorded[k], v)
        for k, v in saved.items()
        if k in recorded and k not in RESUMABLE_CHANGES and recorded[k] != v
    }
    run_now, run_then = recorded.get("run") or {}, read_manifest(checkpoint).get("run") or {}
    for key in ("env_id", "model"):
        if run_now.get(key) is not None and run_then.get(key) not in (None, run_now[key]):
            changed[key] = (run_now[key], run_then[key])
    if changed:
        detail = "; ".join(
            f"{k}: run {a!r} vs checkpoint {b!r}" for k, (a, b) in sorted(changed.items())
        )
        raise UsageError(
            f"{checkpoint.name} in {str(folder)!r} was not written by the run recorded in its "
            f"config.json ({detail}); it looks copied from another run. Evaluate that run's folder, "
            f"or pass the checkpoint folder itself ({str(checkpoint)!r}) to evaluate it anyway."
        )


@contextlib.contextmanager
def open_checkpoint(path: str | Path, attempts: int = 5) -> Iterator[Path]:
    """:func:`find_checkpoint`, kept from being pruned while the block reads it.

    A run that is still training prunes its older checkpoints; the one found may go before it is
    pinned, and then the newest is found again.
    """
    from marft_algos.runs.folder import reading_checkpoint

    for _ in range(attempts):
        checkpoint = find_checkpoint(path)
        with reading_checkpoint(checkpoint) as still_there:
            if still_there:
                yield checkpoint
                return
    raise UsageError(
        f"The checkpoints of {str(path)!r} were deleted as fast as they were found ({attempts} "
        f"tries); a training run with --keep-checkpoints 1 is pruning them: try again, or "
        f"evaluate when it has finished."
    )


def _recorded_env_kwargs(run: Mapping[str, Any], dataset_given: bool) -> dict[str, Any]:
    if run.get("env_kwargs") is not None:
        return dict(run["env_kwargs"])
    spec = run.get("eval_env") or run.get("env") or {}
    kwargs = dict(spec.get("kwargs") or {})
    # Values JSON could not hold were recorded as {"repr": ...}; they cannot be rebuilt.
    opaque = sorted(k for k, v in kwargs.items() if isinstance(v, dict) and set(v) == {"repr"})
    if "dataset" in opaque and not dataset_given and run.get("data") is None:
        raise UsageError(
            f"The run passed its held-out dataset as an object ({kwargs['dataset']['repr']}), which "
            f"cannot be rebuilt from the checkpoint; pass --dataset with the same problems."
        )
    return {k: v for k, v in kwargs.items() if k not in opaque}


def run_device_and_dtype(
    run: Mapping[str, Any], device: str | None, dtype: str | None
) -> tuple[str, str]:
    """The device and weight dtype to evaluate a run with: the given ones, else the run's.

    A run trained on a GPU is evaluated on this machine's GPU when it has one (``cuda``: the
    recorded index may not exist here), else on the CPU; the dtype is the one the run trained in
    (float32 for runs that did not record it), so the numbers are the run's.
    """
    import torch

    if device is None:
        recorded = str(run.get("device") or "cpu")
        device = "cuda" if recorded.startswith("cuda") and torch.cuda.is_available() else "cpu"
        if recorded.startswith("cuda") and device == "cpu":
            logger.warning(
                "The run trained on %s but this machine has no GPU: evaluating on the CPU "
                "(slow for a large model; pass --device to choose).",
                recorded,
            )
    return device, dtype or str(run.get("dtype") or "float32")


def evaluate_checkpoint(
    checkpoint: str | Path, overrides: EvalArguments | None = None
) -> dict[str, Any]:
    """Greedy held-out metrics of a checkpoint, every setting read from it unless overridden."""
    import torch

    import marft_envs
    from marft_algos.cli.train import apply_chat_template
    from marft_algos.rollout.collector import GenerationSettings, RolloutCollector
    from marft_algos.rollout.evaluation import evaluation_requests, greedy, summarize_episodes
    from marft_algos.runs.checkpoint import policy_from_checkpoint, read_manifest, read_state

    o = overrides or EvalArguments()
    manifest = read_manifest(checkpoint)
    run = manifest.get("run") or {}
    config = read_state(checkpoint).get("config", {})
    env_id = o.env or run.get("env_id") or (run.get("eval_env") or run.get("env") or {}).get("id")
    if env_id is None:
        raise UsageError(
            f"{checkpoint} does not record its env (an older checkpoint); pass --env ID."
        )
    kwargs = _recorded_env_kwargs(run, o.dataset is not None)
    data = run.get("data")
    family = family_of(env_id)
    if o.dataset is not None and family is not None:
        data = plan_data(family, None, o.dataset, {"levels": o.levels, "subjects": o.subjects})
    if data is not None and family is not None:
        kwargs["dataset"] = load_part(family, data["eval"])
    kwargs = split_kwargs(env_id, kwargs, "eval")
    env_fn = lambda: marft_envs.make(env_id, **kwargs)  # noqa: E731
    probe = env_fn()
    agents = list(probe.possible_agents)
    if agents != list(manifest["agents"]):
        raise UsageError(
            f"The checkpoint's agents {manifest['agents']} do not match {env_id}'s agents {agents}; evaluate "
            f"on the env it was trained on (leave --env out) or one with the same team."
        )
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
    apply_chat_template(policy, run.get("chat_template"))
    recorded = dict(run.get("generation") or {})
    if not recorded:
        raise UsageError(
            f"{checkpoint} does not record its generation settings (an older checkpoint)."
        )
    settings = greedy(GenerationSettings(**recorded))
    batch = o.batch or int(config.get("rollout_threads", 1))
    generator: Any = policy
    if o.rollout_backend == "vllm":
        from marft_algos.rollout.vllm import VLLMRolloutBackend

        generator = VLLMRolloutBackend(policy)
    try:
        collector = RolloutCollector.from_factory(
            generator, env_fn, batch, settings, seed=int(config.get("seed", 0))
        )
        episodes = collector.collect(
            evaluation_requests(collector, o.episodes or int(config.get("eval_episodes", 64))),
            settings,
        )
    finally:
        if generator is not policy:
            generator.close()
    metrics = summarize_episodes(episodes, "eval")
    if o.samples:
        from marft_algos.runs.samples import episode_transcript

        metrics["samples"] = [episode_transcript(e, i) for i, e in enumerate(episodes[: o.samples])]
    return metrics


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run ``marft eval RUN_OR_CHECKPOINT``; returns the metrics."""
    from rich.console import Console
    from rich.table import Table

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
    with open_checkpoint(values["run"]) as checkpoint:
        metrics = evaluate_checkpoint(checkpoint, args)
    samples = metrics.pop("samples", [])
    text = json.dumps(metrics, indent=2)
    if args.json == "-":
        sys.stdout.write(text + "\n")
        return metrics
    if args.json is not None:
        Path(args.json).write_text(text + "\n")
    console = Console()
    if samples:
        from marft_algos.runs.samples import print_transcripts

        print_transcripts(console, samples)
    table = Table(title=f"{checkpoint} ({metrics['eval/episodes']} held-out episodes, greedy)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    console.print(table)
    accuracy = metrics.get("eval/accuracy")
    if isinstance(accuracy, int | float):
        from marft_algos.rollout.evaluation import format_accuracy

        console.print(f"accuracy {format_accuracy(accuracy, metrics['eval/episodes'])}")
    return metrics
