"""SFT on the team's own successful transcripts (rejection sampling), then MARFT, against MARFT
alone, at equal generated tokens, on the built-in model and ``math-dual-v7`` (README.md).

Per seed, two arms from the same untuned team:

- ``marft``: ``marft train`` with the CLI's preset for the built-in model (40 iterations of 64
  episodes, evaluated greedily on 200 held-out problems every 10 iterations and at the end);
- ``sft+marft``: the untuned team samples ``--collect`` training-split episodes with the rollout
  settings of RL (temperature 1, 32 tokens a message, the actor 8), ``marft sft --min-reward 1``
  fine-tunes each agent on its replies in the solved ones, then ``marft train --init-from`` runs
  MARFT for as many iterations as leave the arm's generated tokens (collection included) equal to
  the ``marft`` arm's.

Held-out success is paired per problem (the same 200 test-split problems in every evaluation):
per seed the difference and McNemar's exact test, over the seeds the mean difference and the test
on all pairs together.

    OMP_NUM_THREADS=1 nice python benchmarks/sft_warm_start/run.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import run_info

from marft_algos.cli.main import main as marft
from marft_algos.rollout.paired import format_paired, paired_outcomes

HERE = Path(__file__).resolve().parent
ENV_ID = "math-dual-v7"
MODEL = "marft-tiny-math"
#: The CLI preset's rollout settings for the built-in model (marft_algos/cli/presets.py).
BUDGETS = {"max_new_tokens": 32, "max_new_tokens_per_agent": {"actor": 8}}
COMMON = ["--env", ENV_ID, "--model", MODEL, "--threads", "1", "--no-plot", "--progress", "off"]


def collect(seed: int, episodes: int, folder: Path) -> dict[str, Any]:
    """Sample ``episodes`` training-split episodes with the untuned team and write them as
    transcripts (``folder/samples.jsonl``); returns the counts and the generated tokens."""
    from marft_algos.cli.env_plan import plan_env
    from marft_algos.policy import MultiAgentPolicy
    from marft_algos.protocols import GenerationSettings
    from marft_algos.rollout.collector import RolloutCollector
    from marft_algos.runs.samples import episode_transcript

    plan = plan_env(ENV_ID, None)
    train_fn, _ = plan.factories()
    policy = MultiAgentPolicy.from_pretrained(MODEL, plan.agents, seed=seed)
    settings = GenerationSettings(temperature=1.0, **BUDGETS)  # type: ignore[arg-type]
    collector = RolloutCollector.from_factory(policy, train_fn, 64, settings, seed=10_000 + seed)
    try:
        done = collector.collect(episodes)
    finally:
        collector.close()
    folder.mkdir(parents=True, exist_ok=True)
    rows = [episode_transcript(e, i, split="train") for i, e in enumerate(done)]
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "episodes": len(done),
        "solved": sum(bool(r["correct"]) for r in rows),
        "generated_tokens": sum(len(d.action_ids) for e in done for d in e.decisions),
    }


def run_tokens(run: Path) -> list[float]:
    """Tokens each training iteration of a run generated, from its metrics (tokens per decision
    times decisions per episode times episodes, per agent)."""
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "rollout/episodes" not in record:
            continue
        agents = [k.split("/")[-1] for k in record if k.startswith("rollout/calls/")]
        out.append(
            sum(
                record[f"rollout/action_tokens_mean/{a}"]
                * record[f"rollout/calls/{a}"]
                * record["rollout/episodes"]
                for a in agents
            )
        )
    return out


def evaluations(run: Path) -> dict[int, list[dict[str, Any]]]:
    """The greedy held-out outcomes of a run, per evaluated iteration."""
    out = {}
    for line in (run / "eval_outcomes.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("prefix") == "eval":
            out[int(record["iteration"])] = record["episodes"]
    return out


def accuracy(rows: list[dict[str, Any]]) -> float:
    return sum(bool(r["correct"]) for r in rows) / len(rows)


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    out = args.out_dir / f"seed{seed}"
    common = [*COMMON, "--eval-episodes", str(args.eval_episodes)]
    start = time.perf_counter()
    marft(
        [
            "train",
            *common,
            "--seed",
            str(seed),
            "--iterations",
            str(args.iterations),
            "--output-dir",
            str(out / "marft"),
            "--overwrite",
        ]
    )
    marft_seconds = time.perf_counter() - start
    tokens_a = run_tokens(out / "marft")

    start = time.perf_counter()
    collected = collect(seed, args.collect, out / "collected")
    marft(
        [
            "sft",
            "--from",
            str(out / "collected" / "samples.jsonl"),
            "--env",
            ENV_ID,
            "--model",
            MODEL,
            "--min-reward",
            "1",
            "--learning-rate",
            str(args.sft_lr),
            "--num-train-epochs",
            str(args.sft_epochs),
            "--seed",
            str(seed),
            "--output-dir",
            str(out / "sft"),
            "--overwrite",
        ]
    )
    per_iteration = statistics.mean(tokens_a)
    iterations_b = max(1, round((sum(tokens_a) - collected["generated_tokens"]) / per_iteration))
    marft(
        [
            "train",
            *common,
            "--seed",
            str(seed),
            "--iterations",
            str(iterations_b),
            "--init-from",
            str(out / "sft"),
            "--output-dir",
            str(out / "sft_marft"),
            "--overwrite",
        ]
    )
    sft_seconds = time.perf_counter() - start
    tokens_b = run_tokens(out / "sft_marft")
    eval_a, eval_b = evaluations(out / "marft"), evaluations(out / "sft_marft")
    final_a, final_b = eval_a[max(eval_a)], eval_b[max(eval_b)]
    paired = paired_outcomes(final_a, final_b)
    sft_alone = paired_outcomes(eval_a[0], eval_b[0])
    assert paired is not None and sft_alone is not None
    sft_records = [json.loads(x) for x in (out / "sft" / "metrics.jsonl").read_text().splitlines()]
    result = {
        "seed": seed,
        "collected": collected,
        "sft_examples": json.loads((out / "sft" / "config.json").read_text())["run"]["counts"],
        "sft_loss": {k: v for k, v in sft_records[-1].items() if k.startswith("sft/loss/")},
        "marft": {
            "iterations": len(tokens_a),
            "generated_tokens": round(sum(tokens_a)),
            "held_out": {str(k): accuracy(v) for k, v in sorted(eval_a.items())},
            "seconds": round(marft_seconds, 1),
        },
        "sft+marft": {
            "iterations": len(tokens_b),
            "generated_tokens": round(sum(tokens_b) + collected["generated_tokens"]),
            "held_out": {str(k): accuracy(v) for k, v in sorted(eval_b.items())},
            "seconds": round(sft_seconds, 1),
        },
        "paired_final": paired.__dict__,
        "paired_untuned_vs_sft": sft_alone.__dict__,
        "final_outcomes": {"marft": final_a, "sft+marft": final_b},
    }
    print(
        f"seed {seed}: untuned {accuracy(eval_a[0]):.3f}, after SFT {accuracy(eval_b[0]):.3f} "
        f"({collected['solved']}/{collected['episodes']} collected episodes solved); final marft "
        f"{accuracy(final_a):.3f} ({result['marft']['generated_tokens']} tokens) vs sft+marft "
        f"{accuracy(final_b):.3f} ({result['sft+marft']['generated_tokens']} tokens): "
        f"{format_paired(paired)}",
        flush=True,
    )
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    from marft_algos.rollout.paired import paired_comparison

    pooled_a = [bool(r["correct"]) for run in runs for r in run["final_outcomes"]["marft"]]
    pooled_b = [bool(r["correct"]) for run in runs for r in run["final_outcomes"]["sft+marft"]]
    differences = [run["paired_final"]["difference"] for run in runs]
    return {
        "seeds": [run["seed"] for run in runs],
        "final_marft": [run["paired_final"]["before"] for run in runs],
        "final_sft_marft": [run["paired_final"]["after"] for run in runs],
        "difference_mean": statistics.mean(differences),
        "difference_std": statistics.stdev(differences) if len(differences) > 1 else 0.0,
        "seeds_sft_marft_ahead": sum(d > 0 for d in differences),
        "pooled": paired_comparison(pooled_a, pooled_b).__dict__,
        "generated_tokens_ratio": [
            run["sft+marft"]["generated_tokens"] / run["marft"]["generated_tokens"] for run in runs
        ],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=40, help="the marft arm's (preset)")
    parser.add_argument("--eval-episodes", type=int, default=200, help="held-out problems (preset)")
    parser.add_argument("--collect", type=int, default=128, help="episodes sampled for SFT")
    parser.add_argument("--sft-lr", type=float, default=1e-3, help="the preset's RL rate")
    parser.add_argument("--sft-epochs", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=Path("runs/sft_warm_start"))
    parser.add_argument("--json", type=Path, default=HERE / "results.json")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    runs = [run_seed(seed, args) for seed in args.seeds]
    result = {
        "run_info": run_info(env_ids=[ENV_ID]),
        "settings": {
            "env": ENV_ID,
            "model": MODEL,
            "iterations_marft": args.iterations,
            "eval_episodes": args.eval_episodes,
            "collect_episodes": args.collect,
            "sft_learning_rate": args.sft_lr,
            "sft_epochs": args.sft_epochs,
            "min_reward": 1,
            **BUDGETS,
        },
        "summary": summarize(runs),
        "runs": runs,
        "seconds": round(time.perf_counter() - start, 1),
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return result


if __name__ == "__main__":
    main()
