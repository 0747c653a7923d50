"""One ``setting:seed`` job of ``support-desk-v2`` (``team_v2.py``) on SmolLM2-135M-Instruct: step 4
of the v2 plan. The protocol (README.md, "support-desk-v2: step 3, the protocol") is this file's
``PROTOCOL`` and ``SETTINGS``, fixed before the first held-out evaluation.

Settings, all from the same untuned model at one budget (``PROTOCOL``: 21 iterations x 48
episodes = 1,008 training episodes, branches counted), evaluated greedily on the same 200
held-out tasks before and after training:

- ``untuned``: the evaluation alone (no training);
- ``marft``: action-level MARFT on the team reward, the router branched 3 routes x 4
  continuations;
- ``grpo``: GRPO on the team reward, the router branched the same way (``num_generations`` 1);
- ``grpo-plain``: v1's recipe on v2: GRPO in groups of 4 episodes of one ticket, no branching,
  every agent at the base learning rate;
- ``independent``: the ``marft`` recipe, each agent paid its own local reward
  (``independent.py``);
- ``single``: the ``marft`` recipe on ``support-desk-single-v2``, one agent (one adapter) making
  every call, branched at its first call (the route).

Each job writes ``<out>/<setting>-seed<k>.json``: held-out success before and after, the paired
McNemar test, the hand-off statistics of both evaluations (``handoffs``, ``desk_handoffs.py``),
the rollouts' learning curve, the device's peak memory, and with ``--attribution`` the
attribution table (each agent alone reverted to the untuned model and alone tuned, as ``marft
eval RUN --attribution``). Its run folder ``<out>/runs/<setting>-seed<k>`` keeps metrics.jsonl,
eval_outcomes.jsonl, the 200 greedy transcripts of each evaluation and the final adapters.

    python benchmarks/program_team/run_v2.py --jobs untuned:0 marft:0
    python benchmarks/program_team/run_v2.py --device cuda --jobs grpo:1 --attribution
    python benchmarks/program_team/run_v2.py --dry-run --out /tmp/v2 --jobs marft:0   # no held-out
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
import team_v2
from desk_handoffs import handoffs
from independent import independent_env
from runner import job_arguments, job_config, job_trainer, run_jobs, write_job_row

import marft_envs
from marft_algos.cli import ALGORITHMS
from marft_algos.runs.outcomes import paired_before_after
from marft_algos.runs.samples import read_samples

HERE = Path(__file__).resolve().parent
MODEL = "smollm2-135m-instruct"
#: Most padded tokens per forward/backward chunk (the smollm2-cpu preset's value).
MAX_CHUNK_TOKENS = 2048

#: The protocol's budget and shared recipe (README.md, step 3; chosen by the step-2 pilots).
PROTOCOL: dict[str, Any] = {
    "iterations": 21,
    "episodes_per_iteration": 48,
    "eval_every": 0,
    "eval_episodes": 200,
    "temperature": team_v2.TEMPERATURE,
    "learning_rate": 5e-4,
    "critic_learning_rate": 1e-4,
    "lora_rank": 8,
    "num_generations": 4,
    "seeds": [0, 1, 2],
}
#: The router at 1e-4 (1e-3 swung it wholesale in two steps) and the reviewer frozen (it drifted
#: to approving wrong answers under GRPO at 5e-4); the specialists at the base rate.
TEAM_RATES = {"router": 1e-4, "reviewer": 0.0}
ROUTER_BRANCH = {"router": {"width": 3, "rollouts": 4}}


@dataclass(frozen=True)
class Setting:
    """One setting of step 4: its trainer and what it changes from the shared recipe."""

    algorithm: str | None
    env_id: str = team_v2.ENV_ID
    branch: dict[str, Any] | None = None
    agent_learning_rates: dict[str, float] = field(default_factory=dict)
    num_generations: int = 1
    independent: bool = False


SETTINGS = {
    "untuned": Setting(None),
    "marft": Setting("action-marft", branch=ROUTER_BRANCH, agent_learning_rates=TEAM_RATES),
    "grpo": Setting("grpo", branch=ROUTER_BRANCH, agent_learning_rates=TEAM_RATES),
    "grpo-plain": Setting("grpo", num_generations=4),
    "independent": Setting(
        "action-marft", branch=ROUTER_BRANCH, agent_learning_rates=TEAM_RATES, independent=True
    ),
    "single": Setting(
        "action-marft",
        env_id=team_v2.SINGLE_ID,
        branch={team_v2.SINGLE_AGENT: {"width": 3, "rollouts": 4}},
    ),
}


def env_fn(setting: Setting, split: str, dry_run: bool = False) -> Any:
    """The job's env factory for ``split``; a dry run evaluates on training tickets, so no
    held-out task is drawn before the protocol's jobs."""
    split = "train" if dry_run else split
    if setting.independent and split == "train":
        return lambda: independent_env(team_v2, team_v2.make_tasks("train"), team_v2.test_tasks())
    return lambda: marft_envs.make(setting.env_id, split=split)


def trainer_settings(name: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """The job's trainer settings: the shared recipe with the setting's changes."""
    setting = SETTINGS[name]
    single = setting.env_id == team_v2.SINGLE_ID
    tokens = team_v2.SINGLE_TOKENS if single else team_v2.TOKENS
    algorithm = setting.algorithm or "action-marft"  # untuned: the trainer only evaluates
    settings = job_config(
        args,
        name,
        seed,
        algorithm,
        max_new_tokens=max(tokens.values()),
        max_new_tokens_per_agent=dict(tokens),
        max_chunk_tokens=MAX_CHUNK_TOKENS,
    )
    if setting.branch is not None:
        settings["branch"] = setting.branch
    if setting.agent_learning_rates:
        settings["agent_learning_rates"] = dict(setting.agent_learning_rates)
    if algorithm == "grpo":
        settings["num_generations"] = setting.num_generations
    return settings


def run_job(name: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    setting = SETTINGS[name]
    settings = trainer_settings(name, seed, args)
    algorithm = setting.algorithm or "action-marft"
    config = ALGORITHMS[algorithm][0](**settings)
    agents = [team_v2.SINGLE_AGENT] if setting.env_id == team_v2.SINGLE_ID else team_v2.AGENTS
    start = time.perf_counter()
    if args.device != "cpu" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer = job_trainer(
        args,
        algorithm,
        agents,
        config,
        seed,
        env_fn(setting, "train"),
        env_fn(setting, "test", args.dry_run),
    )
    try:
        if setting.algorithm is None:
            records = [{"iteration": 0, **trainer.evaluate()}]
        else:
            records = trainer.train()
    finally:
        trainer.close()
    folder = Path(config.output_dir)
    evals = [r for r in records if "eval/accuracy" in r]
    first, last = evals[0]["iteration"], evals[-1]["iteration"]
    paired = paired_before_after(folder, first, last) if last != first else None
    samples: dict[int, list[dict[str, Any]]] = {}
    for episode in read_samples(folder):
        samples.setdefault(int(episode["iteration"]), []).append(episode)
    row: dict[str, Any] = {
        "setting": name,
        "algorithm": setting.algorithm,
        "seed": seed,
        "env_id": setting.env_id,
        "recipe": {k: v for k, v in settings.items() if k != "output_dir"}
        if setting.algorithm
        else None,
        "before": evals[0]["eval/accuracy"],
        "after": evals[-1]["eval/accuracy"],
        "curve": [[r["iteration"], r["eval/accuracy"]] for r in evals],
        "paired": paired.__dict__ if paired else None,
        "rollout_reward": [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r],
        "rollout_routed": [
            r.get("rollout/reward/routed") for r in records if "rollout/reward_mean" in r
        ],
        "train_episodes": sum(int(r.get("rollout/episodes", 0)) for r in records),
        "eval_episodes": evals[-1]["eval/episodes"],
        "handoffs": {
            "before": handoffs(samples[first]) if samples.get(first) else None,
            "after": handoffs(samples[last]) if samples.get(last) else None,
        },
        "dry_run": args.dry_run,
        "device": str(args.device),
        "peak_memory_gb": _peak_memory_gb(args.device),
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    if args.attribution and setting.algorithm is not None:
        # The row first: a job cut off in its attribution keeps its training and evaluations.
        write_job_row(args, name, seed, {**row, "attribution": "not finished"}, [setting.env_id])
        row["attribution"] = attribution(folder, args)
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def attribution(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``marft eval RUN --attribution`` on the job's final adapters and the 200 held-out tasks:
    each agent alone reverted to the untuned model and alone tuned, greedy."""
    from marft_algos.cli.evaluate import main as evaluate

    out = folder / "attribution.json"
    command = [str(folder), "--attribution", "--threads", "1", "--json", str(out)]
    command += ["--device", str(args.device), "--episodes", str(args.eval_episodes)]
    evaluate(command)
    return json.loads(out.read_text())


def _peak_memory_gb(device: str) -> float | None:
    if device == "cpu" or not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = {k: PROTOCOL[k] for k in ("iterations", "episodes_per_iteration", "eval_every")}
    job_arguments(
        parser,
        MODEL,
        HERE / "results" / "v2",
        eval_episodes=PROTOCOL["eval_episodes"],
        num_generations=PROTOCOL["num_generations"],
        temperature=PROTOCOL["temperature"],
        **defaults,
    )
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda")
    parser.add_argument(
        "--attribution", action="store_true", help="after training, the attribution table"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="tiny settings (1 iteration of 12 episodes, 4 evaluation episodes) evaluated on "
        "training tickets, for checking the runner (never a held-out task)",
    )
    args = parser.parse_args(argv)
    if args.dry_run and args.attribution:
        parser.error("--attribution evaluates on held-out tasks; a --dry-run never draws one")
    if args.dry_run:
        args.iterations, args.episodes_per_iteration, args.eval_episodes = 1, 12, 4
    torch.set_num_threads(1)
    team_v2.check_split()
    team_v2.register()
    args.out.mkdir(parents=True, exist_ok=True)
    run_jobs(args, list(SETTINGS), run_job, lambda name: [SETTINGS[name].env_id])


if __name__ == "__main__":
    main()
