"""One ``setting:seed`` job of ``support-desk-v1`` (``team_v1.py``) on SmolLM2-135M-Instruct, on
the CPU by default. The protocol is fixed in README.md ("support-desk-v1").

Settings, at one budget (iterations x episodes, each agent's reply budget ``team_v1.TOKENS``),
all from the same untuned model, evaluated greedily on the same 200 held-out tasks before and
after training:

- ``marft``: action-level MARFT on the team reward (one LoRA adapter per agent, a critic on the
  frozen base);
- ``grpo``: GRPO for every agent on the team reward (groups of ``--num-generations`` episodes of
  one task);
- ``independent``: the ``marft`` trainer with each agent paid its own local reward (router: the
  right department; specialist: a right answer; reviewer: a right verdict);
- ``single``: the ``marft`` trainer on ``support-desk-single-v1``, one agent (one adapter) making
  every call of the same program.

Each job writes ``<out>/<setting>-seed<k>.json`` (held-out success before and after, the paired
McNemar test of the two evaluations, the reward parts before and after, the rollout reward per
iteration) and the run folder ``<out>/runs/<setting>-seed<k>`` (metrics.jsonl,
eval_outcomes.jsonl, the 200 greedy transcripts of each evaluation, the final adapters).

    python benchmarks/program_team/run_v1.py --jobs marft:0
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
import team_v1
from independent import independent_env
from runner import job_arguments, job_config, job_trainer, run_jobs

import marft_envs
from marft_algos.cli import ALGORITHMS
from marft_algos.runs.outcomes import paired_before_after

MODEL = "smollm2-135m-instruct"
SETTINGS = {
    "marft": "action-marft",
    "grpo": "grpo",
    "independent": "action-marft",
    "single": "action-marft",
}
PARTS = ("success", *team_v1.WEIGHTS)
#: Most padded tokens per forward/backward chunk: bounds the update's memory (the smollm2-cpu
#: preset's value) whatever the batch.
MAX_CHUNK_TOKENS = 2048
#: Env copies stepped together: the rollouts use as many as the iteration has episodes, and the
#: 200-task evaluations run 50 at a time (as untuned_v1.py does) instead of 12.
ROLLOUT_THREADS = 50


def env_id(setting: str) -> str:
    return team_v1.SINGLE_ID if setting == "single" else team_v1.ENV_ID


def env_fn(setting: str, split: str) -> Any:
    if setting == "independent" and split == "train":
        return lambda: independent_env(
            team_v1, team_v1.team.make_tasks("train"), team_v1.test_tasks()
        )
    return lambda: marft_envs.make(env_id(setting), split=split)


def part_means(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """The mean of each reward part and the calls per episode, from transcripts' ``info``."""
    n = len(episodes)
    out = {
        p: sum(e["info"].get("reward_parts", {}).get(p, 0.0) for e in episodes) / n for p in PARTS
    }
    out["calls"] = sum(sum(e["info"].get("calls", {}).values()) for e in episodes) / n
    out["episodes"] = n
    return out


def run_job(setting: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    algorithm = SETTINGS[setting]
    tokens = team_v1.SINGLE_TOKENS if setting == "single" else team_v1.TOKENS
    settings = job_config(
        args,
        setting,
        seed,
        algorithm,
        max_new_tokens=max(tokens.values()),
        max_new_tokens_per_agent=dict(tokens),
        max_chunk_tokens=MAX_CHUNK_TOKENS,
    )
    settings["rollout_threads"] = ROLLOUT_THREADS
    config = ALGORITHMS[algorithm][0](**settings)
    agents = [team_v1.SINGLE_AGENT] if setting == "single" else team_v1.AGENTS
    start = time.perf_counter()
    trainer = job_trainer(
        args, algorithm, agents, config, seed, env_fn(setting, "train"), env_fn(setting, "test")
    )
    try:
        records = trainer.train()
    finally:
        trainer.close()
    evals = [r for r in records if "eval/accuracy" in r]
    folder = Path(config.output_dir)
    paired = paired_before_after(folder, evals[0]["iteration"], evals[-1]["iteration"])
    samples = _read_samples(folder)
    return {
        "setting": setting,
        "algorithm": algorithm,
        "seed": seed,
        "env_id": env_id(setting),
        "before": evals[0]["eval/accuracy"],
        "after": evals[-1]["eval/accuracy"],
        "curve": [[r["iteration"], r["eval/accuracy"]] for r in evals],
        "paired": paired.__dict__ if paired else None,
        "rollout_reward": [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r],
        "eval_episodes": evals[-1]["eval/episodes"],
        "parts_before": part_means(samples.get(evals[0]["iteration"], [])) if samples else None,
        "parts_after": part_means(samples.get(evals[-1]["iteration"], [])) if samples else None,
        "device": str(args.device),
        "seconds": round(time.perf_counter() - start, 1),
    }


def _read_samples(folder: Path) -> dict[int, list[dict[str, Any]]]:
    """The evaluations' transcripts by iteration (empty when none were written)."""
    path = next(folder.glob("samples.jsonl*"), None)
    if path is None:
        return {}
    opener = gzip.open if path.suffix == ".gz" else open
    by_iteration: dict[int, list[dict[str, Any]]] = {}
    with opener(path, "rt") as handle:
        for line in handle:
            if line.strip():
                episode = json.loads(line)
                by_iteration.setdefault(episode["iteration"], []).append(episode)
    return by_iteration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    job_arguments(
        parser,
        MODEL,
        Path(__file__).parent / "results" / "v1",
        iterations=10,
        episodes_per_iteration=12,
        eval_every=0,
        eval_episodes=200,
        num_generations=4,
        temperature=0.7,
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device: cpu, cuda (bfloat16 weights there)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    team_v1.team.check_split()
    team_v1.register()
    args.out.mkdir(parents=True, exist_ok=True)
    run_jobs(args, list(SETTINGS), run_job, lambda setting: [env_id(setting)])


if __name__ == "__main__":
    main()
