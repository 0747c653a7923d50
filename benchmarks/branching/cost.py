"""What branching costs: episodes per second and generated tokens per useful decision, plain GRPO
against branched GRPO, measured back to back in one process (arms alternate, ``--repeats``
times; each repeat is ``--iterations`` training iterations from the untuned model).

A *useful* decision is one the update trains with a non-zero advantage, counted once (a branch
tree's shared prefix is one decision): plain GRPO, any decision of an episode whose group of 12
returns is not flat; branched, a planner alternative whose value (the mean of its 4 continuations)
differs from its siblings' leave-one-out mean, and a solver continuation whose 4 siblings' returns
are not flat. Tokens are counted where the policy generates (a shared prefix once).

    OMP_NUM_THREADS=1 nice python benchmarks/branching/cost.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CHOOSER, ENV_ID, MODEL, count_tokens, grpo_config, make_policy, make_trainer
from runner import run_info

from marft_algos.rollout.collector import Episode

HERE = Path(__file__).resolve().parent


def _relative(path: Path) -> str:
    """``path`` from the repository root when it lies inside it (no machine's folder recorded)."""
    root = HERE.parents[1]
    resolved = path.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else path.name


def _flat(values: Sequence[float]) -> bool:
    return max(values) == min(values)


def useful_decisions(arm: str, episodes: Sequence[Episode]) -> dict[str, int]:
    """Decisions per agent trained with a non-zero advantage (see the module docstring)."""
    useful: dict[str, int] = defaultdict(int)
    if arm == "plain":
        groups: dict[Any, list[Episode]] = defaultdict(list)
        for e in episodes:
            groups[e.group].append(e)
        for members in groups.values():
            if not _flat([e.team_return for e in members]):
                for e in members:
                    for d in e.decisions:
                        useful[d.agent] += 1
        return dict(useful)
    alternatives: dict[tuple[int, ...], list[float]] = defaultdict(list)
    for e in episodes:
        assert e.branch is not None
        alternatives[e.branch[:2]].append(e.team_return)
    trees: dict[tuple[int, ...], dict[tuple[int, ...], float]] = defaultdict(dict)
    for path, returns in alternatives.items():
        trees[path[:1]][path] = statistics.mean(returns)
        if not _flat(returns):
            useful["solver"] += len(returns)
    for values in trees.values():
        for path, value in values.items():
            others = [v for p, v in values.items() if p != path]
            if others and value != statistics.mean(others):
                useful[CHOOSER] += 1
    return dict(useful)


def measure(arm: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    policy = make_policy(seed)
    count = count_tokens(policy)
    config = grpo_config(arm, seed=seed, lr=args.lr, tasks=args.tasks, temperature=1.0)
    trainer = make_trainer(arm, policy, config)
    seen: list[list[Episode]] = []
    update = trainer.update

    def keeping(episodes: list[Episode]) -> dict[str, Any]:
        seen.append(episodes)
        return update(episodes)

    trainer.update = keeping  # type: ignore[method-assign]
    rollout_s = update_s = 0.0
    start = time.perf_counter()
    try:
        for _ in range(args.iterations):
            metrics = trainer.train_iteration()
            rollout_s += metrics["time/rollout_s"]
            update_s += metrics["time/update_s"]
    finally:
        trainer.close()
    wall = time.perf_counter() - start
    episodes = sum(len(batch) for batch in seen)
    useful: dict[str, int] = defaultdict(int)
    for batch in seen:
        for agent, n in useful_decisions(arm, batch).items():
            useful[agent] += n
    tokens = count.total
    return {
        "arm": arm,
        "seed": seed,
        "episodes": episodes,
        "generated_tokens": tokens,
        "generated_tokens_by_agent": dict(count.tokens),
        "decisions_generated_by_agent": dict(count.decisions),
        "useful_decisions_by_agent": dict(useful),
        "seconds": round(wall, 2),
        "rollout_seconds": round(rollout_s, 2),
        "update_seconds": round(update_s, 2),
        "episodes_per_second": round(episodes / wall, 2),
        "rollout_episodes_per_second": round(episodes / rollout_s, 2),
        "tokens_per_useful_decision": round(tokens / max(1, sum(useful.values())), 2),
        "tokens_per_useful_chooser_decision": round(tokens / max(1, useful.get(CHOOSER, 0)), 2),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=4, help="tasks per iteration (x12 episodes)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", type=Path, default=HERE / "cost.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = [
        measure(arm, repeat, args)
        for repeat in range(args.repeats)
        for arm in ("plain", "branched")
    ]
    summary: dict[str, Any] = {}
    for arm in ("plain", "branched"):
        mine = [r for r in rows if r["arm"] == arm]
        summary[arm] = {
            key: round(statistics.mean(r[key] for r in mine), 2)
            for key in (
                "episodes_per_second",
                "rollout_episodes_per_second",
                "tokens_per_useful_decision",
                "tokens_per_useful_chooser_decision",
            )
        }
        summary[arm]["tokens_per_episode"] = round(
            sum(r["generated_tokens"] for r in mine) / sum(r["episodes"] for r in mine), 2
        )
    result = {
        "env": ENV_ID,
        "model": MODEL,
        "settings": {k: _relative(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "summary": summary,
        "runs": rows,
        "run_info": run_info([ENV_ID]),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return result


if __name__ == "__main__":
    main()
