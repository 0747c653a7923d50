"""Train an LLM team on math problems with MARFT (or a baseline) on a laptop CPU.

    python examples/train_math.py                      # action-level MARFT, math-dual-v0, built-in model
    python examples/train_math.py --algo token-marft
    python examples/train_math.py --algo ppo --env math-single-v0
    python examples/train_math.py --algo grpo --env math-dual-v0 --num-generations 4
    python examples/train_math.py --dataset math500.jsonl --model Qwen/Qwen2.5-0.5B-Instruct
    python examples/train_math.py --output-dir runs/demo --resume       # continue a stopped run

    python examples/train_math.py --model smollm2-135m-instruct --dataset ../shared/data/gsm8k_test.jsonl

Writes metrics.jsonl, config.json, checkpoints and learning_curve.png to --output-dir, and prints
held-out accuracy before and after training. The defaults come from a preset chosen by the model
(--preset overrides it; the script prints which one it applied): ``cpu-demo`` for the built-in
model, ``smollm2-cpu`` for SmolLM2-135M-Instruct, ``pretrained`` for any other model. The library's
config classes keep the paper's defaults, which ``--preset paper`` (or --paper-defaults) restores.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

import marft_envs
from marft_algos.cli import ALGORITHMS, add_config_arguments, build_trainer, config_from_args
from marft_algos.plotting import plot_learning_curve
from marft_algos.policy import LoraSettings, MultiAgentPolicy
from marft_envs.math.data import load_dataset

#: The CPU demo preset, chosen for the built-in model (measured in docs/builtin_model.md): 40
#: iterations of 64 episodes, two passes over each batch (PPO epochs; GRPO's num_iterations), a
#: 32-token message budget per agent (the actor only writes \\boxed{}, so 8), greedy and sampled
#: held-out evaluation on 200 problems.
DEMO_DEFAULTS = {
    "iterations": 40,
    "episodes_per_iteration": 64,
    "rollout_threads": 64,
    "max_new_tokens": 32,
    "max_new_tokens_per_agent": {"actor": 8},
    "learning_rate": 1e-3,
    "critic_learning_rate": 1e-3,
    "ppo_epochs": 2,
    "num_iterations": 2,
    "entropy_coef": 0.0,
    "eval_every": 10,
    "eval_episodes": 200,
    "eval_sampled": True,
    "num_generations": 4,
}

#: A real pretrained instruct LLM of 0.1-1B parameters: the CPU demo preset's learning rate (1e-3)
#: and two passes per batch blow such a model up after one update (approx-KL ~1e5 measured on
#: SmolLM2-135M), so LoRA-sized steps, one pass per batch, and a budget that fits whole solutions.
PRETRAINED_DEFAULTS = {
    "iterations": 20,
    "episodes_per_iteration": 16,
    "rollout_threads": 16,
    "max_new_tokens": 256,
    "learning_rate": 2e-5,
    "critic_learning_rate": 1e-4,
    "ppo_epochs": 1,
    "num_iterations": 1,
    "entropy_coef": 0.0,
    "eval_every": 5,
    "eval_episodes": 64,
    "num_generations": 4,
    # A whole batch's forward + backward at once needs tens of GB on a 135M model (64 rows of
    # ~130 tokens were killed at 22 GB measured); four chunks give the same gradient.
    "gradient_accumulation_steps": 4,
}

#: SmolLM2-135M-Instruct on a CPU (measured in benchmarks/real_model/RESULTS.md): rollouts at
#: temperature 0.5 (at 1.0 this 135M model's samples are mostly off-topic and never solve a
#: problem), short actions (it writes long derivations; 48 tokens, the actor 24, keep rollouts
#: cheap), groups of 8 for GRPO, and a learning rate LoRA tolerates on this model.
SMOLLM2_DEFAULTS = {
    **PRETRAINED_DEFAULTS,
    "iterations": 12,
    "episodes_per_iteration": 48,
    "rollout_threads": 48,
    "max_new_tokens": 48,
    "max_new_tokens_per_agent": {"actor": 24},
    "temperature": 0.5,
    "learning_rate": 1e-4,
    "eval_every": 0,
    "num_generations": 8,
}

#: Preset name -> script defaults; "paper" keeps every config class's own (paper Table 3) defaults.
PRESETS = {
    "cpu-demo": DEMO_DEFAULTS,
    "smollm2-cpu": SMOLLM2_DEFAULTS,
    "pretrained": PRETRAINED_DEFAULTS,
    "paper": {},
}

#: The preset a model gets when --preset is not given (any other model: "pretrained").
MODEL_PRESETS = {"marft-tiny-math": "cpu-demo", "smollm2-135m-instruct": "smollm2-cpu"}

DEFAULT_MODEL = "marft-tiny-math"

#: The built-in problems the built-in model was trained on (applied to built-in data only): the
#: ``digits`` family (single-digit operands, one to three operations), see docs/builtin_model.md.
DEMO_DATA = {"levels": [1, 2, 3], "subjects": ["digits"]}


def _ints(text: str) -> list[int] | str:
    return "all" if text in ("", "all") else [int(x) for x in text.split(",")]


def _names(text: str) -> list[str] | str:
    return "all" if text in ("", "all") else text.split(",")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train an LLM team on math problems with MARFT or a baseline.")
    parser.add_argument("--algo", choices=sorted(ALGORITHMS), default="action-marft", help="Training algorithm (default: action-marft).")
    parser.add_argument("--env", default="math-dual-v0", help="Registered env id, e.g. math-single-v0 or math-dual-v0 (default: math-dual-v0).")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"Base model: a Hub id, a local folder, or a built-in short name (default: {DEFAULT_MODEL}).")
    parser.add_argument("--dataset", default="builtin:train", help="Training problems: builtin:train, a MATH/GSM8K JSONL, a table, or hf:<name> (default: builtin:train).")
    parser.add_argument("--eval-dataset", default=None, help="Held-out problems (default: builtin:test, or 10%% of --dataset).")
    parser.add_argument("--levels", type=_ints, default=None, help="Keep only these difficulty levels, e.g. 1,2, or 'all' (default: 1,2,3 with built-in data, else all).")
    parser.add_argument("--subjects", type=_names, default=None, help="Keep only these subjects (built-in data: generator families), e.g. arithmetic,word, or 'all' (default: digits with built-in data, else all).")
    parser.add_argument("--output-dir", default="runs/train_math", help="Run directory for metrics, config, checkpoints and the plot (default: runs/train_math).")
    parser.add_argument("--resume", nargs="?", const="latest", default=None, help="Continue from a checkpoint folder, or the newest in --output-dir.")
    parser.add_argument("--lora-rank", type=int, default=8, help="LoRA rank of every agent's adapter (default: 8).")
    parser.add_argument("--lora-alpha", type=float, default=16, help="LoRA alpha (default: 16).")
    parser.add_argument("--threads", type=int, default=1, help="Torch CPU threads; small models run fastest on one, a large model wants more (default: 1).")
    parser.add_argument("--device", default="cpu", help="Torch device (default: cpu).")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="Script defaults: cpu-demo (built-in model), smollm2-cpu (smollm2-135m-instruct), pretrained (any other model), paper (the config classes' defaults) (default: chosen by --model).")
    parser.add_argument("--paper-defaults", action="store_true", help="Same as --preset paper.")
    parser.add_argument("--no-plot", action="store_true", help="Do not write learning_curve.png.")
    config_classes = [config for config, _ in ALGORITHMS.values()]
    # --help shows the built-in model's preset; the preset actually applied is printed at start.
    add_config_arguments(parser, config_classes, skip=("output_dir",), defaults=DEMO_DEFAULTS)
    return parser.parse_args(argv)


def choose_preset(model: str, preset: str | None, paper_defaults: bool = False) -> str:
    """The preset to apply: the one asked for, else the model's own, else ``pretrained``."""
    if paper_defaults:
        if preset not in (None, "paper"):
            raise SystemExit(f"--paper-defaults contradicts --preset {preset}; pass one of them.")
        return "paper"
    return preset or MODEL_PRESETS.get(model, "pretrained")


def data_filters(dataset: str, levels, subjects) -> dict:
    """``load_dataset`` filters: the flags as given, else the demo's built-in problems, else none."""
    builtin = dataset.startswith("builtin")
    choice = {}
    for key, given in (("levels", levels), ("subjects", subjects)):
        if given is None:
            given = DEMO_DATA[key] if builtin else "all"
        choice[key] = None if given == "all" else given
    return choice


def datasets(args: argparse.Namespace):
    builtin = args.dataset.startswith("builtin")
    choice = data_filters(args.dataset, args.levels, args.subjects)
    train = load_dataset(args.dataset, **choice)
    if args.eval_dataset is not None:
        return train, load_dataset(args.eval_dataset, **choice)
    if builtin:
        return train, load_dataset("builtin:test", **choice)
    return train.train_test_split(0.1, seed=0)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console()
    torch.set_num_threads(args.threads)
    config_class, _ = ALGORITHMS[args.algo]
    preset = choose_preset(args.model, args.preset, args.paper_defaults)
    defaults = dict(PRESETS[preset])
    defaults["output_dir"] = args.output_dir

    train_set, eval_set = datasets(args)
    env_fn = lambda: marft_envs.make(args.env, dataset=train_set)  # noqa: E731
    eval_env_fn = lambda: marft_envs.make(args.env, dataset=eval_set)  # noqa: E731
    agents = env_fn().possible_agents
    if len(agents) == 1 and args.max_new_tokens_per_agent is None:
        # The presets' short cap is for a team's actor, which only writes \boxed{}; a lone agent
        # writes the whole solution.
        defaults.pop("max_new_tokens_per_agent", None)
    config = config_from_args(config_class, args, defaults)
    console.print(f"preset [bold]{preset}[/] ({'--preset' if args.preset or args.paper_defaults else 'for ' + args.model}); flags you set override it")
    console.print(
        f"[bold]{args.algo}[/] on [bold]{args.env}[/] (agents: {', '.join(agents)}), model "
        f"[bold]{args.model}[/], {len(train_set)} training / {len(eval_set)} held-out problems"
    )
    policy = MultiAgentPolicy.from_pretrained(
        args.model, agents, lora=LoraSettings(r=args.lora_rank, alpha=args.lora_alpha), device=args.device, seed=config.seed,
        # The policy's log-probs are of the distribution the rollouts sample from.
        temperature=config.temperature,
    )
    trainer = build_trainer(args.algo, policy, env_fn, config, eval_env_fn=eval_env_fn, critic_seed=config.seed)
    if args.resume is not None:
        trainer.resume(None if args.resume == "latest" else args.resume)
        console.print(f"resumed at iteration {trainer.iteration}")

    records = trainer.train(progress=True)
    history = [r for r in trainer.logger.records]
    evals = [r for r in history if "eval/accuracy" in r]
    sampled = any("eval_sampled/accuracy" in r for r in evals)
    table = Table(title="held-out accuracy")
    table.add_column("iteration", justify="right")
    table.add_column("greedy", justify="right")
    if sampled:
        table.add_column(f"sampled (T={config.temperature:g})", justify="right")
    for r in evals:
        row = [str(r["iteration"]), f"{r['eval/accuracy']:.3f}"]
        if sampled:
            row.append(f"{r['eval_sampled/accuracy']:.3f}" if "eval_sampled/accuracy" in r else "")
        table.add_row(*row)
    console.print(table)
    if len(evals) >= 2:
        for key, name in (("eval/accuracy", "greedy"), ("eval_sampled/accuracy", "sampled")):
            first, last = evals[0].get(key), evals[-1].get(key)
            if first is not None and last is not None:
                console.print(
                    f"{name} accuracy before {first:.3f} → after {last:.3f} ({100 * (last - first):+.1f} points)"
                )
    if not args.no_plot:
        path = plot_learning_curve(history, Path(args.output_dir) / "learning_curve.png", title=f"{args.algo} on {args.env}")
        console.print(f"learning curve: {path}")
    return {"records": records, "evals": evals}


if __name__ == "__main__":
    main()
