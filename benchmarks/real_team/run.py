"""Does a team of real LLMs learn as a team? SmolLM2-135M-Instruct, reasoner -> actor, on a CPU.

Three trained settings at the same budget (iterations x episodes per iteration, and generated
tokens per problem), each from the same untuned model and evaluated greedily on the same held-out
problems:

- ``dual``: a reasoner -> actor team (``math-dual-v7`` with the profiles below) tuned with
  action-level MARFT (one LoRA adapter per agent, a critic on the frozen base, shared reward);
- ``ppo``: one agent (``math-single-v7``) tuned with single-agent PPO (same critic and settings);
- ``grpo``: the same single agent tuned with GRPO (groups of 8, no critic).

The task: single-digit arithmetic chains of one or two operations (the built-in ``digits``
family, levels 1-2: "Compute 8 \\times 4 - 2."), trained on the built-in train split and
evaluated on problems of the test split (no problem text in both; the script checks). Each job
writes ``<out>/<setting>-seed<k>.json``: the greedy held-out accuracy before training (the untuned
model: fresh adapters leave it unchanged), at every ``--eval-every`` iterations and after, the
rollout reward per iteration, and for the team the noise check (the same evaluation with the
reasoner's messages replaced by noise, before and after training); the run folder
``<out>/runs/<setting>-seed<k>`` keeps metrics.jsonl and every evaluated transcript
(samples.jsonl). ``summarize.py`` turns the job files into summary.json and the tables.

Run (two jobs at a time on two cores, one torch thread each; about 90 minutes in all)::

    python benchmarks/real_team/run.py --jobs dual:0 grpo:0 ppo:0 dual:1 ... (see README.md)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

import marft_envs
from marft_algos.cli import ALGORITHMS, build_trainer
from marft_algos.policy import LoraSettings, MultiAgentPolicy
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.rollout.evaluation import NoisyMessages, evaluation_requests, greedy
from marft_envs import AgentProfile
from marft_envs.math.data import load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import job_arguments, job_config, run_jobs

MODEL = "smollm2-135m-instruct"

#: Every agent's profile, in every setting (chosen on 48 training-split problems, untuned and
#: greedy; see RESULTS.md): one line of calculation, which this model writes reliably in form and
#: which the grader reads ("5 \\times 3 = 15" answers 15). Alone it solves 38% of those problems;
#: the env's default profiles and boxed-answer profiles did worse for both the single agent and
#: the team (the team's actor rambled or restated instead of answering).
PROFILE = (
    "Write the calculation and its result on one line, for example: "
    "3 + 4 \\times 2 = 3 + 8 = 11. Do not explain."
)

#: The team: the reasoner writes its calculation; the actor, which reads the problem and the
#: reasoner's line, writes the team's answer (graded).
TEAM = (AgentProfile("reasoner", PROFILE), AgentProfile("actor", PROFILE, graded=True))

#: The single agent.
SINGLE = (AgentProfile("actor", PROFILE, graded=True),)

#: Setting -> (env id, profiles, algorithm, tokens per agent). Every setting may generate 48
#: tokens per problem: the team's reasoner and actor 24 each, the single agent 48.
SETTINGS: dict[str, tuple[str, tuple[AgentProfile, ...], str, dict[str, int]]] = {
    "dual": ("math-dual-v7", TEAM, "action-marft", {"reasoner": 24, "actor": 24}),
    "ppo": ("math-single-v7", SINGLE, "ppo", {"actor": 48}),
    "grpo": ("math-single-v7", SINGLE, "grpo", {"actor": 48}),
}

DATA = {"subjects": ["digits"], "levels": [1, 2]}


def datasets(eval_episodes: int) -> tuple[Any, Any]:
    """The training split and the held-out problems, checked to share no problem text."""
    train = load_dataset("builtin:train", size=2000, **DATA)
    held_out = load_dataset("builtin:test", size=eval_episodes, **DATA)
    shared = {p.problem for p in train} & {p.problem for p in held_out}
    if shared:
        raise RuntimeError(f"{len(shared)} held-out problems are in the training split: {shared}")
    return train, held_out


def noise_accuracy(policy: Any, eval_fn: Any, config: Any, episodes: int, seed: int) -> float:
    """Greedy held-out accuracy with the reasoner's messages replaced by noise."""
    noisy = NoisyMessages(policy, ["reasoner"], seed=seed)
    settings = greedy(config.generation)
    collector = RolloutCollector.from_factory(noisy, eval_fn, 50, settings, seed=seed)
    done = collector.collect(evaluation_requests(collector, episodes), settings)
    return sum(bool(e.info.get("correct")) for e in done) / len(done)


def run_job(setting: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    env_id, profiles, algorithm, tokens = SETTINGS[setting]
    train, held_out = datasets(args.eval_episodes)
    env_fn = lambda: marft_envs.make(env_id, dataset=train, profiles=list(profiles))  # noqa: E731
    eval_fn = lambda: marft_envs.make(env_id, dataset=held_out, profiles=list(profiles))  # noqa: E731
    settings = job_config(
        args,
        setting,
        seed,
        algorithm,
        max_new_tokens=max(tokens.values()),
        max_new_tokens_per_agent=tokens,
        gradient_accumulation_steps=4,
    )
    config = ALGORITHMS[algorithm][0](**settings)
    start = time.perf_counter()
    # The policy's temperature is its log-prob convention: the same as the rollouts' sampling.
    policy = MultiAgentPolicy.from_pretrained(
        args.model,
        [p.role for p in profiles],
        lora=LoraSettings(r=args.lora_rank, alpha=2 * args.lora_rank),
        seed=seed,
        temperature=args.temperature,
    )
    trainer = build_trainer(
        algorithm, policy, env_fn, config, eval_env_fn=eval_fn, critic_seed=seed
    )
    row: dict[str, Any] = {
        "setting": setting,
        "algorithm": algorithm,
        "env_id": env_id,
        "seed": seed,
    }
    if setting == "dual":
        row["noise_before"] = noise_accuracy(policy, eval_fn, config, args.eval_episodes, seed)
    records = trainer.train()
    evals = [r for r in records if "eval/accuracy" in r]
    row.update(
        before=evals[0]["eval/accuracy"],
        after=evals[-1]["eval/accuracy"],
        curve=[[r["iteration"], r["eval/accuracy"]] for r in evals],
        rollout_reward=[
            r.get("rollout/reward_mean") for r in records if "rollout/reward_mean" in r
        ],
        eval_episodes=evals[-1]["eval/episodes"],
    )
    if setting == "dual":
        row["noise_after"] = noise_accuracy(policy, eval_fn, config, args.eval_episodes, seed)
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    job_arguments(
        parser,
        MODEL,
        Path(__file__).parent / "results",
        iterations=8,
        episodes_per_iteration=48,
        eval_every=4,
        eval_episodes=100,
        num_generations=8,
        temperature=0.5,
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    run_jobs(args, list(SETTINGS), run_job, lambda setting: [SETTINGS[setting][0]])


if __name__ == "__main__":
    main()
