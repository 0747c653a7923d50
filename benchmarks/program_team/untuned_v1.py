"""The untuned ``support-desk-v1`` on its 200 held-out tasks, greedy: the desk, the desk with the
right route handed to the specialists (their ceiling), and one agent making every call. Writes
``<out>/untuned_v1.json`` (rates, seconds, and each episode's success for paired tests).

    python benchmarks/program_team/untuned_v1.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import team_v1
from run_v1 import MODEL, PARTS
from runner import run_info

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.rollout.evaluation import evaluation_requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument(
        "--envs", nargs="+", default=[team_v1.ENV_ID, team_v1.ORACLE_ID, team_v1.SINGLE_ID]
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    team_v1.team.check_split()
    team_v1.register()
    agents = [*team_v1.AGENTS, team_v1.SINGLE_AGENT]
    policy = MultiAgentPolicy.from_pretrained(args.model, agents, seed=0)
    path = args.out / "untuned_v1.json"
    rows = json.loads(path.read_text())["greedy"] if path.exists() else {}
    for env_id in args.envs:
        tokens = team_v1.SINGLE_TOKENS if env_id == team_v1.SINGLE_ID else team_v1.TOKENS
        settings = GenerationSettings(
            max_new_tokens=max(tokens.values()),
            do_sample=False,
            max_new_tokens_per_agent=dict(tokens),
        )
        start = time.perf_counter()
        make = lambda env_id=env_id: marft_envs.make(env_id, split="test")  # noqa: E731
        collector = RolloutCollector.from_factory(policy, make, 50, settings, seed=0)
        done = collector.collect(evaluation_requests(collector, args.episodes), settings)
        parts = [e.info.get("reward_parts", {}) for e in done]
        row: dict = {p: sum(x.get(p, 0.0) for x in parts) / len(done) for p in PARTS}
        row["reward"] = sum(team_v1.team_reward(x) for x in parts) / len(done)
        row["calls"] = sum(sum(e.info.get("calls", {}).values()) for e in done) / len(done)
        row["episodes"] = len(done)
        row["seconds"] = round(time.perf_counter() - start, 1)
        row["success_by_episode"] = [int(x.get("success", 0.0)) for x in parts]
        rows[env_id] = row
        print(env_id, json.dumps({k: v for k, v in row.items() if k != "success_by_episode"}))
        for env in collector.envs:
            env.close()
        args.out.mkdir(parents=True, exist_ok=True)
        result = {"model": args.model, "greedy": rows, "run_info": run_info(list(rows))}
        path.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
