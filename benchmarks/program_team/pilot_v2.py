"""One recipe pilot of ``support-desk-v2`` (``team_v2.py``) on SmolLM2-135M-Instruct: step 2 of
the v2 plan (README.md, "support-desk-v2: step 2, pilots"). Training tickets only.

A pilot trains the untuned desk for a few iterations with one recipe (trainer, the router's
branch width x continuations, a learning rate per agent, episodes per iteration, agents in
turns), at the rollout temperature ``team_v2.TEMPERATURE``, and evaluates it greedily before and
after on a fixed list of *training-split* tickets (``--eval-tickets``, drawn with ``EVAL_SEED``
from ``tickets_v2.make_tasks("train")``; the rollouts draw other training tickets from the
trainer's seed, so an eval ticket is a rollout ticket only by an unlikely coincidence of all its
records). No held-out task is drawn.

It writes ``<out>/<name>.json``: the recipe, the rollout's reward parts per iteration (success,
right route, ...), the router's value spread and each agent's entropy where logged, the greedy
success, right route and the route share per department before and after, and the wall time.

    python benchmarks/program_team/pilot_v2.py --name grpo-b3x4 --algo grpo --branch router=3x4
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import team_v2
import tickets_v2

import marft_envs
from marft_algos.cli import ALGORITHMS, build_trainer
from marft_algos.policy import LoraSettings, MultiAgentPolicy
from marft_algos.rollout.branch_settings import parse_branch

MODEL = "smollm2-135m-instruct"
#: The pilots' evaluation env: the v2 desk whose "test" tasks are training-split tickets.
PILOT_ID = "support-desk-trainpilot-v2"
EVAL_SEED = 11
MAX_CHUNK_TOKENS = 2048


def eval_tickets(count: int) -> list[dict[str, Any]]:
    """``count`` training-split tickets, the same for every pilot."""
    draw = tickets_v2.make_tasks("train")
    rng = np.random.default_rng(EVAL_SEED)
    return [draw(rng) for _ in range(count)]


def register(count: int) -> list[dict[str, Any]]:
    tasks = eval_tickets(count)
    if PILOT_ID not in marft_envs.registry:
        marft_envs.register_program(
            PILOT_ID,
            team_v2.desk,
            agents=team_v2.AGENTS,
            tasks=team_v2.make_tasks("train"),
            test_tasks=tasks,
            reward_weights=team_v2.WEIGHTS,
            max_calls=team_v2.MAX_CALLS,
            description="Support desk v2, evaluated on training tickets (recipe pilots only).",
        )
    return tasks


def agent_rates(text: str) -> dict[str, float]:
    """``router=1e-4,billing=5e-4`` -> a dict."""
    out = {}
    for item in filter(None, text.split(",")):
        agent, _, rate = item.partition("=")
        if agent not in team_v2.AGENTS:
            raise SystemExit(
                f"--agent-learning-rates: unknown agent {agent!r}; agents: {team_v2.AGENTS}"
            )
        out[agent] = float(rate)
    return out


def evaluation(folder: Path, tasks: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per evaluated iteration: success, right route, the route share per department, approvals."""
    path = next(folder.glob("samples.jsonl*"), None)
    if path is None:
        return {}
    opener = gzip.open if path.suffix == ".gz" else open
    rows: dict[int, list[dict[str, Any]]] = {}
    with opener(path, "rt") as handle:
        for line in handle:
            if line.strip():
                e = json.loads(line)
                rows.setdefault(int(e["iteration"]), []).append(e)
    out = {}
    for it, episodes in sorted(rows.items()):
        n = len(episodes)
        routes: Counter[str] = Counter()
        right: Counter[str] = Counter()
        for e in episodes:
            calls = e["info"].get("calls", {})
            route = next((d for d in team_v2.DEPARTMENTS if calls.get(d)), "None")
            routes[route] += 1
            department = tasks[int(e["options"]["index"])]["department"]
            right[department] += float(e["info"]["reward_parts"].get("success", 0.0))
        parts = {
            p: sum(e["info"]["reward_parts"].get(p, 0.0) for e in episodes) / n
            for p in ("success", "routed", "parsed", "approved", "false_approval")
        }
        out[it] = {
            "episodes": n,
            **parts,
            "route_share": {k: v / n for k, v in sorted(routes.items())},
            "successes_per_department": dict(right),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="the pilot's name (its record's file name)")
    parser.add_argument("--algo", choices=["grpo", "action-marft"], default="grpo")
    parser.add_argument("--branch", default="none", help="e.g. router=3x4 (width x continuations)")
    parser.add_argument("--num-generations", type=int, default=1, help="GRPO: trees/group per task")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--episodes-per-iteration", type=int, default=48)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--agent-learning-rates", default="", help="router=1e-4,reviewer=0")
    parser.add_argument("--agent-schedule", nargs="*", default=None, help="router billing,shipping")
    parser.add_argument("--schedule-period", type=int, default=1)
    parser.add_argument("--critic-learning-rate", type=float, default=1e-4)
    parser.add_argument("--eval-tickets", type=int, default=36, help="0: no evaluation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "pilots_v2")
    parser.add_argument(
        "--runs", type=Path, default=Path("/tmp/marft_pilots_v2"), help="run folders (not kept)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the config and stop")
    args = parser.parse_args()
    torch.set_num_threads(1)
    tickets_v2.check_split()
    tasks = register(max(args.eval_tickets, 1))
    schedule = [w.split(",") for w in args.agent_schedule] if args.agent_schedule else None
    settings: dict[str, Any] = dict(
        iterations=args.iterations,
        episodes_per_iteration=args.episodes_per_iteration,
        rollout_threads=args.episodes_per_iteration,
        temperature=team_v2.TEMPERATURE,
        learning_rate=args.learning_rate,
        agent_learning_rates=agent_rates(args.agent_learning_rates) or None,
        branch=parse_branch(args.branch),
        eval_every=0 if args.eval_tickets else args.iterations + 1,
        eval_episodes=max(args.eval_tickets, 1),
        eval_samples=max(args.eval_tickets, 1),
        seed=args.seed,
        output_dir=str(args.runs / args.name),
        checkpoint_every=0,
        keep_checkpoints=1,
        overwrite=True,
        max_new_tokens=max(team_v2.TOKENS.values()),
        max_new_tokens_per_agent=dict(team_v2.TOKENS),
        max_chunk_tokens=MAX_CHUNK_TOKENS,
    )
    if schedule:
        settings.update(agent_schedule=schedule, schedule_period=args.schedule_period)
    if args.algo == "grpo":
        settings["num_generations"] = args.num_generations
    else:
        settings.update(critic_learning_rate=args.critic_learning_rate, entropy_coef=0.0)
    settings = {k: v for k, v in settings.items() if v is not None}
    config = ALGORITHMS[args.algo][0](**settings)
    if args.dry_run:
        print(json.dumps({k: str(v) for k, v in settings.items()}, indent=1))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    policy = MultiAgentPolicy.from_pretrained(
        args.model,
        team_v2.AGENTS,
        lora=LoraSettings(r=8, alpha=16),
        seed=args.seed,
        temperature=team_v2.TEMPERATURE,
    )
    trainer = build_trainer(
        args.algo,
        policy,
        lambda: marft_envs.make(PILOT_ID, split="train"),
        config,
        eval_env_fn=lambda: marft_envs.make(PILOT_ID, split="test"),
        critic_seed=args.seed,
    )
    try:
        records = trainer.train()
    finally:
        trainer.close()
    keys = ("rollout/reward/", "branch/", "train/entropy", "rollout/reward_mean", "time/")
    per_iteration = [
        {"iteration": r.get("iteration"), **{k: v for k, v in r.items() if k.startswith(keys)}}
        for r in records
        if "rollout/reward_mean" in r
    ]
    row = {
        "name": args.name,
        "command": " ".join(sys.argv[1:]),
        # The run folder is scratch (not kept): its name, not the machine's path.
        "recipe": {k: str(v) for k, v in settings.items() if k != "output_dir"}
        | {"run_folder": args.name},
        "iterations": per_iteration,
        "eval_on_training_tickets": evaluation(Path(config.output_dir), tasks)
        if args.eval_tickets
        else None,
        "seconds": round(time.perf_counter() - start, 1),
    }
    (args.out / f"{args.name}.json").write_text(json.dumps(row, indent=1) + "\n")
    print(json.dumps(row, indent=1), flush=True)


if __name__ == "__main__":
    main()
