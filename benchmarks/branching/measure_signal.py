"""The signal before training (DESIGN.md §9: measure it first): on the TRAINING split, with the
untuned built-in model, the team's success given each choice of the planner, from the same states.

For each of ``--tasks`` training tasks, each of the three options is put in the planner's place
(its message is the option's symbol), and the untuned solver continues ``--continuations`` times
(sampled, temperature 1). Also the untuned planner's own sampled choices, ``--continuations`` per
task. Writes ``signal.json``.

    OMP_NUM_THREADS=1 nice python benchmarks/branching/measure_signal.py
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CHOOSER, ENV_ID, MODEL, TOKENS, env_fn, make_policy
from runner import run_info

from marft_algos.protocols import GenerationSettings
from marft_envs.choice.tasks import OPERATIONS, SYMBOLS, parse_choice

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--continuations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "signal.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    policy = make_policy(args.seed)
    settings = GenerationSettings(
        max_new_tokens=max(TOKENS.values()), max_new_tokens_per_agent=TOKENS
    )
    generator = torch.Generator().manual_seed(args.seed)
    k = args.continuations
    wins: dict[str, list[int]] = {"right": [], "wrong": []}
    by_choice: dict[str, Counter[str]] = {op: Counter() for op in OPERATIONS}
    planner_choices: dict[str, Counter[str]] = {op: Counter() for op in OPERATIONS}
    tasks_with_right_win = 0
    per_op_tasks: Counter[str] = Counter()
    for task_index in range(args.tasks):
        env = env_fn("train")
        env.reset(seed=1_000_000 + task_index)
        task = env.unwrapped.task
        per_op_tasks[task.operation] += 1
        planner_obs = env.observe(CHOOSER)
        for g in policy.generate(CHOOSER, [planner_obs] * k, settings, generator=generator):
            planner_choices[task.operation][str(parse_choice(g.text))] += 1
        right_wins = 0
        for option in OPERATIONS:
            branch = copy.deepcopy(env)
            branch.step(f"{task.a} {SYMBOLS[option]} {task.b}")
            solver = branch.agent_selection
            outs = policy.generate(
                solver, [branch.observe(solver)] * k, settings, generator=generator
            )
            n_right = 0
            for g in outs:
                leaf = copy.deepcopy(branch)
                leaf.step(g.text)
                n_right += bool(leaf.unwrapped.last_round.info["correct"])
            right = option == task.operation
            wins["right" if right else "wrong"].append(n_right)
            by_choice[task.operation][option] += n_right
            right_wins += n_right if right else 0
        tasks_with_right_win += right_wins > 0
    n_right = args.tasks * k
    result = {
        "env": ENV_ID,
        "model": MODEL,
        "split": "train",
        "tasks": args.tasks,
        "continuations": k,
        "success_given_right_choice": sum(wins["right"]) / n_right,
        "success_given_wrong_choice": sum(wins["wrong"]) / (2 * n_right),
        "tasks_where_the_right_choice_ever_won": tasks_with_right_win,
        "success_by_task_operation_and_choice": {
            op: {c: round(v / (per_op_tasks[op] * k), 4) for c, v in by_choice[op].items()}
            for op in OPERATIONS
            if per_op_tasks[op]
        },
        "tasks_by_operation": dict(per_op_tasks),
        "untuned_planner_choices_sampled": {op: dict(c) for op, c in planner_choices.items()},
        "untuned_planner_right_choice_sampled": sum(planner_choices[op][op] for op in OPERATIONS)
        / n_right,
        "seconds": round(time.perf_counter() - start, 1),
        "run_info": run_info([ENV_ID]),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "run_info"}, indent=1))
    return result


if __name__ == "__main__":
    main()
