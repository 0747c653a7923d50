"""marft's GRPOTrainer vs TRL's GRPOTrainer: throughput and held-out accuracy, same budget, one run.

Both trainers fine-tune a LoRA adapter (the same ``LoraSettings`` → peft ``LoraConfig``) on the same
base model, on the same prompts (the ``math-single-v7`` chat messages of ``builtin:train``
problems), with the same reward (``marft_envs.math.grade_answer(completion, gold)``), the same
group size, completion length, learning rate, clip range, loss aggregation (``dapo``), group reward
scaling, ``beta=0``, one optimizer update per batch of ``prompts_per_update × num_generations``
completions, and the same number of updates. marft runs first and records which problems each of
its updates used; TRL then gets exactly those prompts in that order (no shuffling), so update ``k``
of both trainers sees the same prompts. Throughput counts completions per second between the end of
the warm-up updates and the end of the last update (per-update timestamps; nothing else is inside
that window). Accuracy is measured afterwards, for both adapters, by the same greedy evaluation code
on the first ``--eval-episodes`` problems of ``builtin:test``.

``trl`` is a benchmark-only dependency (``pip install trl``); the library never imports it.

    python benchmarks/trl_grpo/compare_trl.py                     # the measurement in RESULTS.md
    python benchmarks/trl_grpo/compare_trl.py --updates 2 --eval-episodes 16   # smoke
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import run_info

HERE = Path(__file__).resolve().parent
ENV_ID = "math-single-v7"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="marft-tiny-math", help="Base model (default: marft-tiny-math)."
    )
    parser.add_argument(
        "--updates", type=int, default=30, help="Optimizer updates for each trainer (default: 30)."
    )
    parser.add_argument(
        "--prompts-per-update",
        type=int,
        default=8,
        help="Distinct prompts per update (default: 8).",
    )
    parser.add_argument(
        "--num-generations", type=int, default=4, help="Completions per prompt, G (default: 4)."
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=32,
        help="Completion length cap (default: 32, the demo's message budget).",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=1e-3,
        help="Adapter learning rate (default: 1e-3, the demo's).",
    )
    parser.add_argument(
        "--warmup-updates", type=int, default=1, help="Updates left out of the throughput window."
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
        "--eval-episodes",
        type=int,
        default=200,
        help="Held-out builtin:test problems (the first N).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of both trainers (default: 0).")
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch.set_num_threads for both (default: 1)."
    )
    parser.add_argument(
        "--output-dir",
        default=str(HERE / "runs"),
        help="Scratch folder (default: benchmarks/trl_grpo/runs).",
    )
    parser.add_argument(
        "--results", default=str(HERE / "results.json"), help="Where to write the results JSON."
    )
    return parser.parse_args(argv)


def level_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``load_dataset`` keyword arguments for ``--levels`` and ``--families``."""
    kwargs: dict[str, Any] = {}
    if args.levels is not None:
        kwargs["levels"] = list(args.levels)
    if args.families is not None:
        kwargs["subjects"] = list(args.families)
    return kwargs


def evaluate(args: argparse.Namespace, adapter_path: str | None) -> dict[str, Any]:
    """Greedy held-out accuracy of the base model with ``adapter_path`` (None: untuned)."""
    import marft_envs
    from marft_algos.policy import AgentSpec, MultiAgentPolicy
    from marft_algos.rollout.collector import GenerationSettings, RolloutCollector
    from marft_algos.rollout.evaluation import evaluation_requests, greedy, summarize_episodes
    from marft_envs.math.data import load_dataset

    test = load_dataset("builtin:test", **level_kwargs(args))
    eval_env_fn = lambda: marft_envs.make(ENV_ID, dataset=test)  # noqa: E731
    agents = eval_env_fn().possible_agents
    # A frozen agent with adapter_path=None acts with the plain base model (the untuned row).
    specs = {a: AgentSpec(adapter_path=adapter_path, trainable=False) for a in agents}
    policy = MultiAgentPolicy.from_pretrained(args.model, agents, specs=specs)
    settings = greedy(GenerationSettings(max_new_tokens=args.max_new_tokens))
    threads = args.prompts_per_update * args.num_generations
    collector = RolloutCollector.from_factory(policy, eval_env_fn, threads, settings, seed=0)
    episodes = collector.collect(evaluation_requests(collector, args.eval_episodes), settings)
    return summarize_episodes(episodes, "eval")


def throughput(stamps: Sequence[float], episodes_per_update: int, warmup: int) -> dict[str, float]:
    """Completions per second after ``warmup`` updates (stamps[0] is the start, stamps[k] the end of update k)."""
    updates = len(stamps) - 1
    window = stamps[-1] - stamps[warmup]
    timed = updates - warmup
    per_update = [b - a for a, b in itertools.pairwise(stamps)]
    return {
        "episodes_per_s": timed * episodes_per_update / window,
        "timed_updates": timed,
        "timed_s": window,
        "total_s": stamps[-1] - stamps[0],
        "episodes_per_s_including_warmup": updates * episodes_per_update / (stamps[-1] - stamps[0]),
        "update_s_median": statistics.median(per_update[warmup:]),
        "first_update_s": per_update[0],
    }


def run_marft(
    args: argparse.Namespace, adapter_dir: Path, *, full_updates: bool = False
) -> tuple[dict[str, Any], list[list[dict[str, Any]]]]:
    """Train with marft's GRPOTrainer; return timing/metrics and the prompts of each update (in group order).

    marft skips the forward/backward pass of completions whose advantage is 0 (with ``beta=0`` and
    no entropy bonus they add nothing to the gradient); TRL computes every completion. With
    ``full_updates`` (``skip_zero_advantages=False``) marft runs every completion too, so the
    control run does the same work per update as TRL, with the same gradient as the default run.
    """
    import marft_envs
    from marft_algos.policy import LoraSettings, MultiAgentPolicy
    from marft_algos.rollout.collector import Episode
    from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
    from marft_envs.math.data import load_dataset

    train = load_dataset("builtin:train", **level_kwargs(args))
    env_fn = lambda: marft_envs.make(ENV_ID, dataset=train)  # noqa: E731
    agents = env_fn().possible_agents
    batch = args.prompts_per_update * args.num_generations
    config = GRPOConfig(
        iterations=args.updates,
        episodes_per_iteration=batch,
        rollout_threads=batch,
        num_generations=args.num_generations,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.learning_rate,
        beta=0.0,
        skip_zero_advantages=not full_updates,
        seed=args.seed,
    )
    batches: list[list[Episode]] = []

    class RecordingGRPOTrainer(GRPOTrainer):
        """Keeps each update's episodes so TRL can be given the same prompts."""

        def collect_with_stats(self) -> tuple[list[Episode], dict[str, Any]]:
            episodes, stats = super().collect_with_stats()
            batches.append(episodes)
            return episodes, stats

    policy = MultiAgentPolicy.from_pretrained(
        args.model, agents, lora=LoraSettings(), seed=args.seed
    )
    trainer = RecordingGRPOTrainer(policy, env_fn, config)
    records = []
    stamps = [time.perf_counter()]
    for _ in range(args.updates):
        records.append(trainer.train_iteration())
        stamps.append(time.perf_counter())
    policy.save_adapters(str(adapter_dir))

    # The prompts of every update, one entry per group, recovered by resetting an env with the group's seed.
    env = env_fn()
    tokenizer = policy.tokenizer(agents[0])
    updates: list[list[dict[str, Any]]] = []
    mismatched = 0
    for episodes in batches:
        groups: dict[int, Episode] = {}
        for e in episodes:
            groups.setdefault(int(e.group), e)
        rows = []
        for _, e in sorted(groups.items()):
            env.reset(seed=e.seed, options=e.options)
            messages = env.observe(env.agent_selection)["messages"]
            gold = e.info["gold"]
            ids = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            mismatched += int(list(ids) != list(e.decisions[0].prompt_ids))
            rows.append({"prompt": [dict(m) for m in messages], "gold": gold})
        updates.append(rows)
    result = {
        **throughput(stamps, batch, args.warmup_updates),
        "reward_mean_per_update": [float(r["rollout/reward_mean"]) for r in records],
        "completion_tokens_mean": statistics.fmean(
            float(r["rollout/action_tokens_mean"]) for r in records
        ),
        "prompt_render_mismatches": mismatched,
        "rollout_s_total": sum(float(r["time/rollout_s"]) for r in records),
        "update_s_total": sum(float(r["time/update_s"]) for r in records),
        "zero_std_fraction_mean": statistics.fmean(
            float(r["rollout/zero_std_fraction"]) for r in records
        ),
    }
    return result, updates


def run_trl(
    args: argparse.Namespace, updates: list[list[dict[str, Any]]], adapter_dir: Path
) -> dict[str, Any]:
    """Train with TRL's GRPOTrainer on the same prompts, in the same order."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback

    from marft_algos.policy import LoraSettings
    from marft_algos.policy.pretrained import resolve_model
    from marft_envs.math import grade_answer

    rows = [row for update in updates for row in update]
    dataset = Dataset.from_list(rows)

    def math_reward(
        completions: list[list[dict[str, str]]], gold: list[str], **_: Any
    ) -> list[float]:
        """1.0 when the completion's final boxed answer grades equal to the gold answer."""
        return [
            float(grade_answer(c[0]["content"], g)) for c, g in zip(completions, gold, strict=True)
        ]

    stamps: list[float] = []

    class Stamps(TrainerCallback):
        """Timestamps at the start of training and at the end of every optimizer update."""

        def on_train_begin(self, *a: Any, **k: Any) -> None:
            stamps.append(time.perf_counter())

        def on_step_end(self, *a: Any, **k: Any) -> None:
            stamps.append(time.perf_counter())

    batch = args.prompts_per_update * args.num_generations
    config = trl.GRPOConfig(
        output_dir=str(Path(args.output_dir) / "trl"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
        max_steps=args.updates,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=args.num_generations,
        max_completion_length=args.max_new_tokens,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        weight_decay=0.0,
        adam_epsilon=1e-5,
        max_grad_norm=0.5,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        num_iterations=1,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        shuffle_dataset=False,
        gradient_checkpointing=False,
        disable_dropout=True,
        model_init_kwargs={"dtype": torch.float32},
    )
    lora = LoraSettings()
    trainer = trl.GRPOTrainer(
        model=resolve_model(args.model),
        reward_funcs=math_reward,
        args=config,
        train_dataset=dataset,
        peft_config=lora.to_peft(),
        callbacks=[Stamps()],
    )
    trainer.train()
    trainer.model.save_pretrained(str(adapter_dir))
    logs = [r for r in trainer.state.log_history if "reward" in r]
    return {
        **throughput(stamps, batch, args.warmup_updates),
        "optimizer_updates": trainer.state.global_step,
        "reward_mean_per_update": [float(r["reward"]) for r in logs],
        "completion_tokens_mean": statistics.fmean(
            float(r.get("completions/mean_length", float("nan"))) for r in logs
        ),
        "trl_version": trl.__version__,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run both trainers back to back, evaluate both adapters, write the results JSON."""
    args = parse_args(argv)
    if args.updates <= args.warmup_updates:
        raise SystemExit(
            f"--updates ({args.updates}) must exceed --warmup-updates ({args.warmup_updates}) to time anything."
        )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import torch
    import transformers

    torch.set_num_threads(args.torch_threads)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    marft_result, updates = run_marft(args, out / "marft_adapter")
    print(f"marft: {marft_result['episodes_per_s']:.2f} episodes/s", flush=True)
    full_result, full_updates = run_marft(args, out / "marft_full_adapter", full_updates=True)
    full_result["same_prompts_as_default_run"] = full_updates == updates
    print(
        f"marft, every completion through the update: {full_result['episodes_per_s']:.2f} episodes/s",
        flush=True,
    )
    trl_result = run_trl(args, updates, out / "trl_adapter")
    print(f"trl:   {trl_result['episodes_per_s']:.2f} episodes/s", flush=True)

    threads = args.prompts_per_update * args.num_generations
    untuned = evaluate(args, None)
    marft_result["eval"] = evaluate(args, str(out / "marft_adapter" / "actor"))
    trl_result["eval"] = evaluate(args, str(out / "trl_adapter"))
    full_result["eval"] = evaluate(args, str(out / "marft_full_adapter" / "actor"))
    results = {
        "model": args.model,
        "settings": {k: v for k, v in vars(args).items() if k not in ("output_dir", "results")},
        "episodes_per_update": threads,
        "untuned_eval": untuned,
        "marft": marft_result,
        "trl": trl_result,
        "marft_full_updates": full_result,
        "speed_ratio": marft_result["episodes_per_s"] / trl_result["episodes_per_s"],
        "speed_ratio_full_updates": full_result["episodes_per_s"] / trl_result["episodes_per_s"],
        "speed_ratio_including_warmup": marft_result["episodes_per_s_including_warmup"]
        / trl_result["episodes_per_s_including_warmup"],
        "run_info": run_info([ENV_ID]),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(),
        },
    }
    Path(args.results).write_text(json.dumps(results, indent=2))
    print(
        f"speed ratio (marft / TRL): {results['speed_ratio']:.2f}x "
        f"({results['speed_ratio_full_updates']:.2f}x with every completion updated); held-out accuracy untuned "
        f"{untuned['eval/accuracy']:.3f}, marft {marft_result['eval']['eval/accuracy']:.3f}, "
        f"TRL {trl_result['eval']['eval/accuracy']:.3f}"
    )
    return results


if __name__ == "__main__":
    main()
