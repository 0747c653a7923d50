"""Untuned SmolLM2-135M-Instruct on the TRAINING split of ``support-desk-v1``, one role at a
time (never the held-out tasks): the router's hand-offs, the specialists given the right route,
the reviewer's verdicts on their greedy answers; then the whole desk as the env runs it, greedy
and sampled, with the reward each behaviour earned. Writes ``<out>/probe_v1.json``.

    python benchmarks/program_team/probe_v1.py --tasks 48
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import team
import team_v1
from runner import run_info

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.rendering import render_prompt_ids
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.rollout.evaluation import evaluation_requests

MODEL = "smollm2-135m-instruct"


def texts(policy: Any, agent: str, batch: list[list[dict]], settings: GenerationSettings) -> list:
    return [g.text for g in policy.generate(agent, batch, settings, generator=None)]


def roles(policy: Any, tasks: list[dict[str, Any]], settings: GenerationSettings) -> dict:
    """Each role alone: router hand-offs, specialists with the right route, reviewer verdicts."""
    system = [{"role": "system", "content": team_v1.ROUTER}, *team_v1.ROUTER_EXAMPLES]
    routes = [
        team.parse_route(t)
        for t in texts(
            policy,
            "router",
            [[*system, {"role": "user", "content": x["request"]}] for x in tasks],
            settings,
        )
    ]
    answers = []
    for department in team_v1.DEPARTMENTS:
        mine = [x for x in tasks if x["department"] == department]
        batch = [
            [
                {
                    "role": "system",
                    "content": team_v1.SPECIALIST.format(
                        department=department, records=x["records"][department]
                    ),
                },
                {"role": "user", "content": x["request"]},
            ]
            for x in mine
        ]
        answers += list(zip(mine, texts(policy, department, batch, settings), strict=True))
    reviews = [
        [
            {
                "role": "system",
                "content": team_v1.REVIEWER.format(records=x["records"][x["department"]]),
            },
            *team_v1.REVIEWER_EXAMPLES,
            {"role": "user", "content": f"Request: {x['request']}\nAnswer: {a}"},
        ]
        for x, a in answers
    ]
    verdicts = [team_v1.verdict(v) for v in texts(policy, "reviewer", reviews, settings)]
    right = [team.grade(a, x) for x, a in answers]
    n = len(tasks)
    return {
        "router_parsed": sum(r is not None for r in routes) / n,
        "router_right": sum(r == x["department"] for r, x in zip(routes, tasks, strict=True)) / n,
        "router_routes": dict(Counter(str(r) for r in routes)),
        "specialist_success": sum(right) / n,
        "specialist_by_kind": dict(
            Counter(
                f"{x['department']}/{x['field']}"
                for (x, _), ok in zip(answers, right, strict=True)
                if ok
            )
        ),
        "reviewer_form": sum(v is not None for v in verdicts) / n,
        "reviewer_approve": sum(v == "approve" for v in verdicts) / n,
        "reviewer_right_verdict": sum(
            (v == "approve") == ok for v, ok in zip(verdicts, right, strict=True)
        )
        / n,
        "examples": {
            "answer": answers[0][1],
            "review_prompt_tokens": len(
                render_prompt_ids(policy.tokenizer("reviewer"), reviews[0])
            ),
        },
    }


def desk(policy: Any, env_id: str, episodes: int, settings: GenerationSettings) -> dict:
    """The whole desk through the env on training tasks; rates and reward per behaviour."""
    make = lambda: marft_envs.make(env_id, split="train")  # noqa: E731
    collector = RolloutCollector.from_factory(policy, make, 48, settings, seed=1)
    start = time.perf_counter()
    done = collector.collect(evaluation_requests(collector, episodes), settings)
    seconds = time.perf_counter() - start
    for env in collector.envs:
        env.close()
    parts = [e.info.get("reward_parts", {}) for e in done]
    behaviour: dict[str, list[float]] = {"quit": [], "fail": [], "succeed": []}
    for p in parts:
        kind = "succeed" if p["success"] else ("fail" if p["parsed"] else "quit")
        behaviour[kind].append(team_v1.team_reward(p))
    row = {k: float(np.mean([p.get(k, 0.0) for p in parts])) for k in parts[0]}
    row["calls"] = float(np.mean([sum(e.info.get("calls", {}).values()) for e in done]))
    row["reward"] = float(np.mean([team_v1.team_reward(p) for p in parts]))
    row["behaviour"] = {
        k: {"episodes": len(v), "reward": float(np.mean(v)) if v else None}
        for k, v in behaviour.items()
    }
    row["episodes"] = len(done)
    row["seconds"] = round(seconds, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--skip-desk", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    team_v1.register()
    policy = MultiAgentPolicy.from_pretrained(
        MODEL, [*team_v1.AGENTS, team_v1.SINGLE_AGENT], seed=0
    )
    rng = np.random.default_rng(7)
    draw = team.make_tasks("train")
    tasks = [draw(rng) for _ in range(args.tasks)]
    greedy = GenerationSettings(
        max_new_tokens=24, do_sample=False, max_new_tokens_per_agent=team_v1.TOKENS
    )
    sampled = GenerationSettings(
        max_new_tokens=24,
        temperature=args.temperature,
        max_new_tokens_per_agent=team_v1.TOKENS,
    )
    torch.manual_seed(0)
    result: dict[str, Any] = {"model": MODEL, "tasks": args.tasks, "split": "train"}
    for name, settings in (("greedy", greedy), ("sampled", sampled)):
        start = time.perf_counter()
        result[f"roles_{name}"] = roles(policy, tasks, settings)
        result[f"roles_{name}"]["seconds"] = round(time.perf_counter() - start, 1)
        print(name, json.dumps(result[f"roles_{name}"]), flush=True)
    if not args.skip_desk:
        for name, settings in (("greedy", greedy), ("sampled", sampled)):
            for env_id in (team_v1.ENV_ID, team_v1.ORACLE_ID):
                result[f"{env_id}_{name}"] = desk(policy, env_id, args.tasks, settings)
                print(env_id, name, json.dumps(result[f"{env_id}_{name}"]), flush=True)
    result["run_info"] = run_info([team_v1.ENV_ID, team_v1.ORACLE_ID])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe_v1.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
