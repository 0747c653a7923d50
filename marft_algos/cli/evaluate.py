"""``marft eval``: held-out accuracy of a run or checkpoint, with every setting read from the run.

The env id and its arguments, the data plan, the model, the LoRA settings, the generation settings,
the number of held-out episodes, the batch (env copies) and the torch thread count all come from
the checkpoint's manifest, so on a finished run this reproduces the run's final ``eval/accuracy``
exactly. Flags override them, e.g. ``--dataset math500.jsonl`` for other problems.

The untuned team (adapters off) runs on the same episodes for the paired before → after line, and
``--attribution`` adds every agent alone reverted and alone tuned
(:mod:`marft_algos.rollout.attribution`).
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
from marft_algos.cli.program_failures import reporting_program_failures
from marft_algos.cli.task_sources import check_same_tasks, recorded_tasks

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


def _recorded_env_kwargs(
    run: Mapping[str, Any], dataset_given: bool, env_id: str | None = None
) -> dict[str, Any]:
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
    out = {k: v for k, v in kwargs.items() if k not in opaque}
    # A function is recorded as {"callable": "module:qualname"}: the env's registered one (e.g.
    # register_program's program) is left to the registry; any other is imported again.
    import marft_envs

    spec = marft_envs.registry.get(env_id) if env_id is not None else None
    registered = spec.to_json()["kwargs"] if spec is not None else {}
    for key, value in list(out.items()):
        is_tasks, tasks = recorded_tasks(key, value, registered.get(key))  # a source, not rows
        if is_tasks and tasks is None:
            del out[key]  # the registration holds the recorded tasks
        elif is_tasks:
            out[key] = tasks
        elif isinstance(value, dict) and set(value) == {"callable"}:
            if registered.get(key) == value:
                del out[key]
            else:
                out[key] = _import_callable(key, value["callable"])
    return out


def _import_callable(key: str, name: str) -> Any:
    """The function a run record names as ``module:qualname`` (how it records a callable env
    argument, e.g. an agent program), imported here."""
    import importlib

    module, _, qualname = name.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError):
        raise UsageError(
            f"The run passed its env argument {key!r} as the function {name}, which cannot be "
            f"imported here; run marft eval where that module is importable (e.g. from its folder "
            f"or with it on PYTHONPATH)."
        ) from None
    return found


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
    """Greedy held-out metrics of a checkpoint, every setting read from it unless overridden.

    Returns:
        ``eval/...`` metrics of the checkpoint; with ``before``, ``before/...`` of the untuned
        team and ``paired/...`` (:meth:`~marft_algos.rollout.paired.PairedComparison.as_dict`);
        with ``attribution``, ``attribution`` (``{"greedy": rows, "sampled": rows}``, rows of
        :func:`~marft_algos.rollout.attribution.attribution_rows`); with ``samples``, ``samples``
        (transcripts).
    """
    import torch

    import marft_envs
    from marft_algos.policy.rendering import fill_chat_template
    from marft_algos.rollout.attribution import SettingsPolicy
    from marft_algos.rollout.collector import GenerationSettings, RolloutCollector
    from marft_algos.rollout.evaluation import evaluation_requests, greedy
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
    kwargs = _recorded_env_kwargs(run, o.dataset is not None, env_id)
    data = run.get("data")
    family = family_of(env_id)
    if o.dataset is not None and family is not None:
        data = plan_data(family, None, o.dataset, {"levels": o.levels, "subjects": o.subjects})
    if data is not None and family is not None:
        kwargs["dataset"] = load_part(family, data["eval"])
    kwargs = split_kwargs(env_id, kwargs, "eval")
    env_fn = lambda: marft_envs.make(env_id, **kwargs)  # noqa: E731
    probe = env_fn()
    check_same_tasks(run, probe)  # the tasks the run recorded by their source and sha256
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
    try:
        collector = RolloutCollector.from_factory(generator, env_fn, batch, settings, seed=seed)
        requests = evaluation_requests(
            collector, o.episodes or int(config.get("eval_episodes", 64))
        )
        if isinstance(generator, SettingsPolicy):
            metrics = _evaluate_settings(
                generator, collector, requests, settings, sampling, seed, o
            )
        else:
            metrics = _summaries(collector.collect(requests, settings), None, o)
    finally:
        if not isinstance(generator, SettingsPolicy):
            generator.close()
    return metrics


def _evaluate_settings(
    policy: Any,
    collector: Any,
    requests: Sequence[Any],
    greedy_settings: Any,
    sampling: Any,
    seed: int,
    o: EvalArguments,
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
    metrics = _summaries(episodes[frozenset()], episodes.get(everyone) if o.before else None, o)
    if o.attribution:
        metrics["attribution"] = {"greedy": attribution_rows(chosen, episodes)}
        if o.attribution_sampled:
            sampled = collect_settings(policy, run(sampling), chosen)
            metrics["attribution"]["sampled"] = attribution_rows(chosen, sampled)
        metrics["attribution"]["generations"] = {"run": policy.generated, "reused": policy.reused}
    return metrics


def _summaries(
    tuned: Sequence[Any], untuned: Sequence[Any] | None, o: EvalArguments
) -> dict[str, Any]:
    """``eval/...`` of the checkpoint's episodes, ``before/...`` and ``paired/...`` with the
    untuned team's, and the transcripts."""
    from marft_algos.rollout.evaluation import episode_outcomes, summarize_episodes
    from marft_algos.rollout.paired import paired_outcomes

    metrics = summarize_episodes(tuned, "eval")
    if untuned is not None:
        before = summarize_episodes(untuned, "before")
        metrics.update({k: v for k, v in before.items() if k.count("/") == 1})
        comparison = paired_outcomes(episode_outcomes(untuned), episode_outcomes(tuned))
        if comparison is not None:
            metrics.update(comparison.as_dict("paired"))
    if o.samples:
        from marft_algos.runs.samples import episode_transcript

        metrics["samples"] = [episode_transcript(e, i) for i, e in enumerate(tuned[: o.samples])]
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
    with (
        open_checkpoint(values["run"]) as checkpoint,
        reporting_program_failures(checkpoint.parent),
    ):
        metrics = evaluate_checkpoint(checkpoint, args)
    text = json.dumps(metrics, indent=2, default=repr)
    if "attribution" in metrics:
        saved = checkpoint.parent / ATTRIBUTION_FILE
        saved.write_text(json.dumps(_attribution_record(checkpoint, metrics), indent=2) + "\n")
    if args.json == "-":
        sys.stdout.write(text + "\n")
        return metrics
    if args.json is not None:
        Path(args.json).write_text(text + "\n")
    console = Console()
    samples = metrics.get("samples", [])
    if samples:
        from marft_algos.runs.samples import print_transcripts

        print_transcripts(console, samples, show_system=args.show_system)
    table = Table(title=f"{checkpoint} ({metrics['eval/episodes']} held-out episodes, greedy)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if isinstance(value, int | float | str):
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    console.print(table)
    for decoding, rows in (metrics.get("attribution") or {}).items():
        if decoding in ("greedy", "sampled"):
            console.print(_attribution_table(rows, decoding))
    if "attribution" in metrics:
        console.print(
            f"attribution saved to {checkpoint.parent / ATTRIBUTION_FILE}. Reading it: an agent "
            f"whose reversion costs nothing did not contribute; one whose reversion helps "
            f"(a positive difference) regressed."
        )
    _headline(console, metrics)
    return metrics


#: File the attribution is saved to, in the run folder.
ATTRIBUTION_FILE = "attribution.json"


def _attribution_record(checkpoint: Path, metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {"checkpoint": checkpoint.name, **metrics["attribution"]}


def _attribution_table(rows: Sequence[Mapping[str, Any]], decoding: str) -> Any:
    """The settings as a rich table: accuracy and reward, each with its paired difference to
    all tuned."""
    from rich.table import Table

    n = rows[0]["episodes"] if rows else 0
    table = Table(
        title=f"attribution ({decoding}, {n} held-out episodes): each setting against all tuned "
        f"on the same episodes, ± paired standard error"
    )
    table.add_column("setting")
    table.add_column("accuracy", justify="right")
    table.add_column("Δ points", justify="right")
    table.add_column("→right/→wrong (p)", justify="right")
    table.add_column("reward (Δ)", justify="right")
    for r in rows:
        first = not r["untuned"]
        table.add_row(
            r["setting"].replace(" = ", "\n= "),
            f"{r['accuracy']:.3f} ± {r['accuracy_se']:.3f}",
            ""
            if first
            else f"{100 * r['accuracy_difference']:+.1f} ± {100 * r['accuracy_difference_se']:.1f}",
            "" if first else f"{r['wrong_to_right']}/{r['right_to_wrong']} (p={r['p_value']:.2g})",
            f"{r['reward_mean']:.3f}"
            + (
                ""
                if first
                else f" ({r['reward_difference']:+.3f} ± {r['reward_difference_se']:.3f})"
            ),
        )
    return table


def _headline(console: Any, metrics: Mapping[str, Any]) -> None:
    """``accuracy ...`` or, with the untuned team evaluated, the before → after lines."""
    from marft_algos.rollout.evaluation import format_accuracy, format_change
    from marft_algos.rollout.paired import PairedComparison, format_paired

    accuracy, n = metrics.get("eval/accuracy"), metrics.get("eval/episodes")
    if not isinstance(accuracy, int | float):
        return
    before, n_before = metrics.get("before/accuracy"), metrics.get("before/episodes")
    if not isinstance(before, int | float):
        console.print(f"accuracy {format_accuracy(accuracy, n)}")
        return
    console.print(
        f"accuracy before (untuned) {format_accuracy(before, n_before)} → after "
        f"{format_accuracy(accuracy, n)} ({format_change(before, n_before, accuracy, n)})"
    )
    fields = {k.removeprefix("paired/"): v for k, v in metrics.items() if k.startswith("paired/")}
    if fields:
        console.print(f"  same episodes: {format_paired(PairedComparison(**fields))}")
