"""The paper's comparison in miniature: single agent vs reasoner → actor team, untuned and fine-tuned.

Settings (DESIGN §5): untuned single agent (``math-single-v7``), single-agent PPO at action and at
token level, GRPO single, untuned dual team (``math-dual-v7``), action-level MARFT on the team
(also with per-agent advantage normalisation), token-level MARFT, GRPO, RLOO and REINFORCE++ dual. Every trained
setting gets the same budget (iterations × episodes per iteration, the same max tokens per agent,
the same shared hyper-parameters) and runs for each seed; held-out greedy accuracy on
``builtin:test`` (the first ``--eval-episodes`` problems, the same for every run) is reported as
mean ± sample std over seeds.

The task: the built-in model's problems (``digits``, levels 1-3) with a message budget of 24 new
tokens for every agent. The worked solution of a three-step problem with its ``\\boxed{}`` answer
is 28-30 tokens, longer than one message: a single agent cannot write it, while in the team the
reasoner carries the steps (at most 24 tokens) and the actor the answer (5), as the paper's team
has twice the generation budget of one agent. Every team run is also evaluated, after training
and untuned, with the reasoner's messages replaced by noise
(:class:`marft_algos.rollout.evaluation.NoisyMessages`): the check that the team's edge comes from what
the reasoner tells the actor. ``--max-new-tokens 32`` gives the earlier comparison, in which every
solution fits one message.

The untuned settings are the iteration-0 evaluations of the trained runs on the same env: a fresh
LoRA adapter has B = 0, so the policy before the first update *is* the untuned base model (greedy
decoding, same problems), and every trained run re-measures it.

    python benchmarks/comparison/run_comparison.py                       # the full comparison
    python benchmarks/comparison/run_comparison.py --iterations 2 --seeds 0 --eval-episodes 16  # smoke

Writes ``runs/<setting>/seed<k>/`` (metrics.jsonl, config.json, result.json, checkpoint) under
``--output-dir`` (default ``benchmarks/comparison/runs``, gitignored), then ``summary.json``,
``summary.md`` and ``learning_curves.png`` in ``--output-dir``'s parent unless ``--summary-dir``
says otherwise. Finished runs (a ``result.json``) are reused, so a stopped comparison continues.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import run_info

HERE = Path(__file__).resolve().parent

#: Shared hyper-parameters of every trained setting: marft_algos.cli.presets.DEMO_DEFAULTS (the
#: CPU preset for the built-in model) with a smaller budget per iteration (32 episodes; iterations
#: from the command line), and one change: no 8-token cap on the actor. In math-single-v7 the lone
#: agent is also named "actor" and must write the whole solution, so the cap would cut the
#: single-agent settings short; every agent of every setting gets the same 24 tokens instead (one
#: message holds a three-step problem's worked steps, or its answer, but not both).
#: ``num_generations`` and ``num_iterations`` (passes over a batch) apply to the critic-free
#: trainers (GRPO, RLOO; REINFORCE++ overrides ``num_generations`` to 1, its paper's setting);
#: ``critic_learning_rate`` and ``ppo_epochs`` (the same two passes) to the actor-critic trainers.
SHARED_HYPERPARAMETERS: dict[str, Any] = {
    "episodes_per_iteration": 32,
    "rollout_threads": 32,
    "max_new_tokens": 24,
    "max_new_tokens_per_agent": None,
    "learning_rate": 1e-3,
    "critic_learning_rate": 1e-3,
    "ppo_epochs": 2,
    "num_iterations": 2,
    "entropy_coef": 0.0,
    "num_generations": 4,
}


@dataclass(frozen=True)
class Setting:
    """One row of the comparison.

    Attributes:
        name: Row name (also the run folder).
        env_id: Registered env id.
        algorithm: Key of ``marft_algos.cli.ALGORITHMS``; None for an untuned setting.
        overrides: Config fields specific to the setting (e.g. PPO's ``level``).
        label: Human-readable label for tables and plots.
    """

    name: str
    env_id: str
    algorithm: str | None
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    label: str = ""


SETTINGS: tuple[Setting, ...] = (
    Setting("single-untuned", "math-single-v7", None, label="single, untuned"),
    Setting(
        "single-ppo-action",
        "math-single-v7",
        "ppo",
        {"level": "action"},
        label="single, PPO action-level",
    ),
    Setting(
        "single-ppo-token",
        "math-single-v7",
        "ppo",
        {"level": "token"},
        label="single, PPO token-level",
    ),
    Setting("single-grpo", "math-single-v7", "grpo", label="single, GRPO"),
    Setting("dual-untuned", "math-dual-v7", None, label="dual, untuned"),
    Setting("dual-action-marft", "math-dual-v7", "action-marft", label="dual, action-level MARFT"),
    Setting(
        "dual-action-marft-agent-norm",
        "math-dual-v7",
        "action-marft",
        {"normalize_advantages_per_agent": True},
        label="dual, action-level MARFT, per-agent adv. norm",
    ),
    Setting("dual-token-marft", "math-dual-v7", "token-marft", label="dual, token-level MARFT"),
    Setting("dual-grpo", "math-dual-v7", "grpo", label="dual, GRPO"),
    Setting("dual-rloo", "math-dual-v7", "rloo", label="dual, RLOO (action level)"),
    # REINFORCE++ as its paper runs it: one sample per task (32 tasks per iteration, the same
    # 32 episodes as every other setting).
    Setting(
        "dual-reinforce-pp",
        "math-dual-v7",
        "reinforce-pp",
        {"num_generations": 1},
        label="dual, REINFORCE++ (token level)",
    ),
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (the budget and where to write)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="marft-tiny-math", help="Base model (default: marft-tiny-math)."
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="Seeds of every trained setting."
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=30,
        help="Training iterations of every trained setting (default: 30).",
    )
    parser.add_argument(
        "--episodes-per-iteration",
        type=int,
        default=None,
        help="Override of the shared value (32).",
    )
    parser.add_argument(
        "--learning-rate", type=float, default=None, help="Override of the shared value (1e-3)."
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, help="Override of the shared value (24)."
    )
    parser.add_argument(
        "--actor-max-new-tokens",
        type=int,
        default=None,
        help="Cap on the actor's actions (default: none, max-new-tokens for every agent).",
    )
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=200,
        help="Held-out builtin:test problems (the first N).",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=10,
        help="Held-out evaluation every K iterations (default: 10).",
    )
    parser.add_argument(
        "--levels",
        type=int,
        nargs="+",
        default=[1, 2, 3],
        help="Problem levels of builtin:train and builtin:test (default: 1 2 3, the built-in model's).",
    )
    parser.add_argument(
        "--families",
        nargs="+",
        default=["digits"],
        help="Generator families of both splits (load_dataset subjects; default: digits, the built-in model's).",
    )
    parser.add_argument(
        "--lora-rank", type=int, default=8, help="LoRA rank (LoraSettings default: 8)."
    )
    parser.add_argument(
        "--lora-alpha", type=float, default=16, help="LoRA alpha (LoraSettings default: 16)."
    )
    parser.add_argument(
        "--settings", nargs="+", default=None, help=f"Subset of {[s.name for s in SETTINGS]}."
    )
    parser.add_argument(
        "--output-dir",
        default=str(HERE / "runs"),
        help="Run folders (default: benchmarks/comparison/runs).",
    )
    parser.add_argument(
        "--summary-dir",
        default=None,
        help="summary.json/.md and the plot (default: --output-dir's parent).",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch.set_num_threads (default 1: the built-in model is tiny, and more threads than free "
        "cores makes OpenMP spin and run far slower on a shared machine).",
    )
    parser.add_argument(
        "--no-reuse", action="store_true", help="Re-run settings that already have a result.json."
    )
    return parser.parse_args(argv)


def dataset_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``load_dataset`` keyword arguments for ``--levels`` and ``--families``."""
    kwargs: dict[str, Any] = {}
    if args.levels is not None:
        kwargs["levels"] = list(args.levels)
    if args.families is not None:
        kwargs["subjects"] = list(args.families)
    return kwargs


def shared_hyperparameters(args: argparse.Namespace) -> dict[str, Any]:
    """The shared hyper-parameters with the command-line budget applied."""
    shared = json.loads(json.dumps(SHARED_HYPERPARAMETERS))
    shared["iterations"] = args.iterations
    shared["eval_every"] = args.eval_every
    shared["eval_episodes"] = args.eval_episodes
    if args.episodes_per_iteration is not None:
        shared["episodes_per_iteration"] = args.episodes_per_iteration
        shared["rollout_threads"] = args.episodes_per_iteration
    if args.learning_rate is not None:
        shared["learning_rate"] = args.learning_rate
    if args.max_new_tokens is not None:
        shared["max_new_tokens"] = args.max_new_tokens
    if args.actor_max_new_tokens is not None:
        shared["max_new_tokens_per_agent"] = {"actor": args.actor_max_new_tokens}
    return shared


def make_config(
    config_class: type, shared: dict[str, Any], setting: Setting, seed: int, output_dir: Path
) -> Any:
    """The setting's config: the shared fields the class has, the setting's overrides, the seed."""
    names = {f.name for f in dataclasses.fields(config_class)}
    values = {k: v for k, v in shared.items() if k in names}
    values.update(setting.overrides)
    values.update(
        seed=seed, output_dir=str(output_dir), overwrite=True
    )  # a rerun replaces an unfinished one
    return config_class(**values)


def noise_reasoner_accuracy(
    policy: Any, eval_env_fn: Callable[[], Any], config: Any, seed: int
) -> float:
    """Held-out greedy accuracy with the reasoner's messages replaced by noise (same problems)."""
    from marft_algos.rollout.collector import RolloutCollector
    from marft_algos.rollout.evaluation import (
        NoisyMessages,
        evaluation_requests,
        greedy,
        summarize_episodes,
    )

    noisy = NoisyMessages(policy, ["reasoner"], seed=seed)
    collector = RolloutCollector.from_factory(
        noisy, eval_env_fn, config.rollout_threads, greedy(config.generation), seed=seed
    )
    episodes = collector.collect(evaluation_requests(collector, config.eval_episodes))
    return float(summarize_episodes(episodes, "eval")["eval/accuracy"])


def run_one(
    setting: Setting,
    seed: int,
    shared: dict[str, Any],
    args: argparse.Namespace,
    datasets: tuple[Any, Any],
    run_dir: Path,
) -> dict[str, Any]:
    """Train one (setting, seed) with the library's trainer; return its result record."""
    import marft_envs
    from marft_algos.cli import ALGORITHMS, build_trainer
    from marft_algos.policy import LoraSettings, MultiAgentPolicy

    assert setting.algorithm is not None
    train_set, test_set = datasets
    env_fn: Callable[[], Any] = lambda: marft_envs.make(setting.env_id, dataset=train_set)  # noqa: E731
    eval_env_fn: Callable[[], Any] = lambda: marft_envs.make(setting.env_id, dataset=test_set)  # noqa: E731
    agents = env_fn().possible_agents
    config_class, _ = ALGORITHMS[setting.algorithm]
    config = make_config(config_class, shared, setting, seed, run_dir)
    start = time.perf_counter()
    policy = MultiAgentPolicy.from_pretrained(
        args.model, agents, lora=LoraSettings(r=args.lora_rank, alpha=args.lora_alpha), seed=seed
    )
    trainer = build_trainer(
        setting.algorithm, policy, env_fn, config, eval_env_fn=eval_env_fn, critic_seed=seed
    )
    trainer.train()
    wall = time.perf_counter() - start
    history = list(trainer.logger.records)
    evals = [
        (int(r["iteration"]), float(r["eval/accuracy"])) for r in history if "eval/accuracy" in r
    ]
    train_time = sum(
        float(r.get("time/rollout_s", 0.0)) + float(r.get("time/update_s", 0.0)) for r in history
    )
    noise: dict[str, float] = {}
    if "reasoner" in agents:
        # After training, so the check does not touch the run's random streams; the untuned team
        # is a freshly loaded base model.
        untuned = MultiAgentPolicy.from_pretrained(args.model, agents, seed=seed)
        noise = {
            "noise_reasoner_accuracy": noise_reasoner_accuracy(policy, eval_env_fn, config, seed),
            "untuned_noise_reasoner_accuracy": noise_reasoner_accuracy(
                untuned, eval_env_fn, config, seed
            ),
        }
    result = {
        "setting": setting.name,
        "seed": seed,
        "algorithm": setting.algorithm,
        "env_id": setting.env_id,
        "initial_accuracy": evals[0][1],
        "final_accuracy": evals[-1][1],
        "eval_curve": evals,
        "rollout_accuracy": [
            float(r["rollout/accuracy"]) for r in history if "rollout/accuracy" in r
        ],
        "entropy_blowups": int(sum(int(r.get("train/entropy_blowup", 0)) for r in history)),
        **noise,
        "wall_s": wall,
        "train_s": train_time,
        "config": {"algorithm": setting.algorithm, **config.to_dict()},
        "run_info": run_info([setting.env_id]),
    }
    (run_dir / "result.json").write_text(json.dumps(result, indent=2))
    return result


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    values = list(values)
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(
    results: dict[str, list[dict[str, Any]]], selected: Sequence[Setting]
) -> dict[str, dict[str, Any]]:
    """Per-setting accuracies over seeds; untuned rows from the trained runs' iteration-0 evaluations."""
    rows: dict[str, dict[str, Any]] = {}
    for setting in selected:
        if setting.algorithm is None:
            sources = [
                r
                for s in SETTINGS
                if s.env_id == setting.env_id and s.algorithm
                for r in results.get(s.name, [])
            ]
            accs = [r["initial_accuracy"] for r in sources]
            if not accs:
                continue
            rows[setting.name] = {
                "label": setting.label,
                "accuracy_mean": mean_std(accs)[0],
                "accuracy_std": mean_std(accs)[1],
                "values": accs,
                "distinct_values": sorted(set(accs)),
                "measured_by": "iteration-0 evaluation of every trained run on this env",
                **noise_fields([r.get("untuned_noise_reasoner_accuracy") for r in sources]),
            }
            continue
        runs = sorted(results.get(setting.name, []), key=lambda r: r["seed"])
        if not runs:
            continue
        finals = [r["final_accuracy"] for r in runs]
        mean, std = mean_std(finals)
        rows[setting.name] = {
            "label": setting.label,
            "accuracy_mean": mean,
            "accuracy_std": std,
            "values": finals,
            "seeds": [r["seed"] for r in runs],
            "best_eval_mean": statistics.fmean(max(a for _, a in r["eval_curve"]) for r in runs),
            "entropy_blowups": sum(r["entropy_blowups"] for r in runs),
            "wall_s_mean": statistics.fmean(r["wall_s"] for r in runs),
            **noise_fields([r.get("noise_reasoner_accuracy") for r in runs]),
        }
    return rows


def noise_fields(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean ± std of the noise-reasoner accuracies (nothing for runs without a reasoner)."""
    present = [v for v in values if v is not None]
    if not present:
        return {}
    mean, std = mean_std(present)
    return {
        "noise_reasoner_accuracy_mean": mean,
        "noise_reasoner_accuracy_std": std,
        "noise_reasoner_values": present,
    }


SINGLE_ROWS = ("single-untuned", "single-ppo-action", "single-ppo-token", "single-grpo")


def goal_checks(rows: dict[str, dict[str, Any]]) -> dict[str, bool | None]:
    """The goal, in the paper's order: untuned dual above untuned single; dual action-level MARFT
    above every single-agent row by more than the seed spread (its mean minus its std above the
    other's mean plus std); with the reasoner's messages replaced by noise, the tuned team at or
    below the single agents."""
    checks: dict[str, bool | None] = {}
    if "dual-untuned" in rows and "single-untuned" in rows:
        checks["dual-untuned > single-untuned"] = (
            rows["dual-untuned"]["accuracy_mean"] > rows["single-untuned"]["accuracy_mean"]
        )
    target = rows.get("dual-action-marft")
    if target is None:
        return checks
    low = target["accuracy_mean"] - target["accuracy_std"]
    if "dual-untuned" in rows:
        checks["dual-action-marft > dual-untuned"] = (
            target["accuracy_mean"] > rows["dual-untuned"]["accuracy_mean"]
        )
    singles = [name for name in SINGLE_ROWS if name in rows]
    for name in singles:
        high = rows[name]["accuracy_mean"] + rows[name]["accuracy_std"]
        checks[f"dual-action-marft > {name} by more than the seed spread"] = low > high
    if "noise_reasoner_accuracy_mean" in target and singles:
        noisy = target["noise_reasoner_accuracy_mean"]
        checks["dual-action-marft with a noise reasoner <= single-untuned"] = (
            noisy <= rows["single-untuned"]["accuracy_mean"] if "single-untuned" in rows else None
        )
        best = max(rows[name]["accuracy_mean"] for name in singles)
        checks["dual-action-marft with a noise reasoner <= best single-agent row"] = noisy <= best
    return checks


def markdown_table(rows: dict[str, dict[str, Any]]) -> str:
    """The results table (accuracy in percent)."""
    lines = [
        "| setting | held-out accuracy (%) mean ± std | per seed (%) | best eval (%) mean | entropy blow-ups "
        "| reasoner's messages replaced by noise (%) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows.values():
        per_seed = ", ".join(f"{100 * v:.1f}" for v in row["values"])
        if "seeds" not in row and len(row["distinct_values"]) == 1:
            per_seed = f"{100 * row['distinct_values'][0]:.1f} (all {len(row['values'])} runs' iteration 0)"
        best = f"{100 * row['best_eval_mean']:.1f}" if "best_eval_mean" in row else "—"
        blowups = str(row.get("entropy_blowups", "—"))
        noise = "—"
        if "noise_reasoner_accuracy_mean" in row:
            noise = f"{100 * row['noise_reasoner_accuracy_mean']:.1f} ± {100 * row['noise_reasoner_accuracy_std']:.1f}"
        lines.append(
            f"| {row['label']} | {100 * row['accuracy_mean']:.1f} ± {100 * row['accuracy_std']:.1f} | {per_seed} "
            f"| {best} | {blowups} | {noise} |"
        )
    return "\n".join(lines)


def plot(
    results: dict[str, list[dict[str, Any]]], rows: dict[str, dict[str, Any]], path: Path
) -> Path:
    """Learning curves: held-out greedy accuracy (left) and rollout accuracy (right), mean ± std band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax_eval, ax_roll) = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = plt.get_cmap("tab10")
    for i, setting in enumerate(SETTINGS):
        color = colors(i)
        style = "-" if setting.env_id == "math-dual-v7" else "--"
        if setting.algorithm is None:
            if setting.name in rows:
                level = 100 * rows[setting.name]["accuracy_mean"]
                ax_eval.axhline(
                    level, color=color, linestyle=":", linewidth=1.5, label=setting.label
                )
            continue
        runs = results.get(setting.name, [])
        if not runs:
            continue
        iters = [it for it, _ in runs[0]["eval_curve"]]
        curves = (
            np.array(
                [
                    [a for _, a in r["eval_curve"]]
                    for r in runs
                    if len(r["eval_curve"]) == len(iters)
                ]
            )
            * 100
        )
        mean, std = (
            curves.mean(0),
            curves.std(0, ddof=1) if len(curves) > 1 else np.zeros(len(iters)),
        )
        ax_eval.plot(iters, mean, style, color=color, marker="o", markersize=3, label=setting.label)
        ax_eval.fill_between(iters, mean - std, mean + std, color=color, alpha=0.15)
        roll = np.array([r["rollout_accuracy"] for r in runs]) * 100
        window = 3
        kernel = np.ones(window) / window
        smooth = np.array(
            [
                np.convolve(np.pad(c, (window - 1, 0), mode="edge"), kernel, mode="valid")
                for c in roll
            ]
        )
        x = np.arange(1, roll.shape[1] + 1)
        m, s = smooth.mean(0), smooth.std(0, ddof=1) if len(smooth) > 1 else np.zeros(len(x))
        ax_roll.plot(x, m, style, color=color, label=setting.label)
        ax_roll.fill_between(x, m - s, m + s, color=color, alpha=0.15)
    ax_eval.set(
        xlabel="iteration",
        ylabel="held-out greedy accuracy (%)",
        title="builtin:test (greedy), mean ± std over seeds",
    )
    ax_roll.set(
        xlabel="iteration",
        ylabel="rollout accuracy (%)",
        title="training rollouts (sampled, 3-iteration mean)",
    )
    for ax in (ax_eval, ax_roll):
        ax.grid(alpha=0.3)
    ax_eval.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def machine() -> dict[str, Any]:
    """Where the comparison ran."""
    import torch
    import transformers

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run (or reuse) every selected (setting, seed), then write the summary, table and plot."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(args.torch_threads)
    from marft_envs.math.data import load_dataset

    names = {s.name for s in SETTINGS}
    unknown = sorted(set(args.settings or []) - names)
    if unknown:
        raise SystemExit(f"Unknown setting(s) {unknown}; choose from {sorted(names)}.")
    selected = [s for s in SETTINGS if args.settings is None or s.name in args.settings]
    shared = shared_hyperparameters(args)
    output_dir = Path(args.output_dir)
    summary_dir = Path(args.summary_dir) if args.summary_dir else output_dir.parent
    level_kwargs = dataset_kwargs(args)
    datasets = (
        load_dataset("builtin:train", **level_kwargs),
        load_dataset("builtin:test", **level_kwargs),
    )
    results: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    # Seeds outermost, so that a comparison stopped early has every setting at its first seeds.
    for seed in args.seeds:
        for setting in selected:
            if setting.algorithm is None:
                continue
            run_dir = output_dir / setting.name / f"seed{seed}"
            done = run_dir / "result.json"
            if done.exists() and not args.no_reuse:
                result = json.loads(done.read_text())
                if result["config"]["iterations"] == args.iterations:
                    results.setdefault(setting.name, []).append(result)
                    print(
                        f"reused {setting.name} seed {seed}: {100 * result['final_accuracy']:.1f}%",
                        flush=True,
                    )
                    continue
            result = run_one(setting, seed, shared, args, datasets, run_dir)
            results.setdefault(setting.name, []).append(result)
            print(
                f"{setting.name} seed {seed}: {100 * result['initial_accuracy']:.1f}% → "
                f"{100 * result['final_accuracy']:.1f}% in {result['wall_s']:.0f} s "
                f"(elapsed {time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    rows = summarize(results, selected)
    summary = {
        "model": args.model,
        "seeds": args.seeds,
        "budget": {
            "iterations": args.iterations,
            "episodes_per_iteration": shared["episodes_per_iteration"],
            "episodes_per_run": args.iterations * shared["episodes_per_iteration"],
            "max_new_tokens": shared["max_new_tokens"],
            "max_new_tokens_per_agent": shared["max_new_tokens_per_agent"],
            "note": "max_new_tokens caps every message: the single agent writes one, the team two (one each)",
        },
        "levels": args.levels,
        "families": args.families,
        "eval": {
            "dataset": "builtin:test",
            "episodes": args.eval_episodes,
            "decoding": "greedy",
            "every": args.eval_every,
        },
        "hyperparameters": shared,
        "lora": {"r": args.lora_rank, "alpha": args.lora_alpha},
        "rows": rows,
        "goal_checks": goal_checks(rows),
        "wall_s": time.perf_counter() - started,
        "machine": machine(),
        "run_info": run_info(sorted({s.env_id for s in selected})),
    }
    summary_dir.mkdir(parents=True, exist_ok=True)
    (summary_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    table = markdown_table(rows)
    (summary_dir / "summary.md").write_text(table + "\n")
    if any(s.algorithm for s in selected):
        plot(results, rows, summary_dir / "learning_curves.png")
    print(table)
    for check, ok in summary["goal_checks"].items():
        print(f"{check}: {ok}")
    return summary


if __name__ == "__main__":
    main()
