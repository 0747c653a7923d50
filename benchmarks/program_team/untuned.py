"""The untuned team on the held-out tasks, greedy: the whole desk, and the desk with the right
route handed to the specialists (their ceiling). Writes ``<out>/untuned.json``.

    python benchmarks/program_team/untuned.py
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
import team
from run import MODEL, PARTS
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
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    team.check_split()
    team.register()
    policy = MultiAgentPolicy.from_pretrained(args.model, team.AGENTS, seed=0)
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, do_sample=False)
    rows = {}
    for env_id in (team.ENV_ID, team.ORACLE_ID):
        start = time.perf_counter()
        make = lambda env_id=env_id: marft_envs.make(env_id, split="test")  # noqa: E731
        collector = RolloutCollector.from_factory(policy, make, 50, settings, seed=0)
        done = collector.collect(evaluation_requests(collector, args.episodes), settings)
        row = {
            p: sum(e.info.get("reward_parts", {}).get(p, 0.0) for e in done) / len(done)
            for p in PARTS
        }
        row["calls"] = sum(sum(e.info.get("calls", {}).values()) for e in done) / len(done)
        row["episodes"] = len(done)
        row["seconds"] = round(time.perf_counter() - start, 1)
        rows[env_id] = row
        print(env_id, json.dumps(row), flush=True)
        for env in collector.envs:
            env.close()
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"model": args.model, "greedy": rows, "run_info": run_info([team.ENV_ID])}
    (args.out / "untuned.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
