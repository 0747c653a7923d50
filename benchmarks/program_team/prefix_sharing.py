"""Where a support-desk-v1 iteration's time goes, and what sharing prompt beginnings saves.

On SmolLM2-135M-Instruct, one torch thread, from the same untuned model with the same seed, each
phase (``--phases``) on each path: one training iteration of the v1 desk (``team_v1.py``) with
GRPO (``desk_grpo``), with action-level MARFT (``desk_marft``) and with GRPO and the router branched
3 x 4 (``desk_branched``, the program replayed up to the branch), the desk's greedy evaluation on
held-out tasks (``eval``), and one iteration of the README's SmolLM2 GRPO recipe (``recipe``:
``code-single-v2``, 64 episodes in groups of 4). The paths:

- ``today``: the path before prompt-beginning sharing: identical prompts prefilled once
  (rollouts) and run once (updates), every other prompt from its first token
  (``policy.shared_prefix_tokens = None``, ``policy.prefix_store_tokens = 0``, and the critic
  runs every row's padded prompt at every pass: ``Critic.share_prompts = False``);
- ``shared``: the default: prompts of a call that begin alike run their beginning once, in the
  rollouts and in the update, each agent's earlier prompts are kept under the current weights
  (the prefix store), and a frozen critic computes each distinct observation once per base
  weights.

The two paths alternate (``--repeats`` rounds, the order reversed every other round), so load on
the machine falls on both alike. Each iteration is profiled by wrapping the library's own
functions: rollout prefill (``kv_cache.prompt_caches`` under ``decode``) and decode steps (the
rest of ``decode``), the update's forward passes by kind (current policy with gradients,
reference, other no-gradient passes), the critic's passes, and every ``backward``. Prompt tokens
and generated tokens are counted at ``decode``. The episodes are the same in both paths up to
float round-off (same seed, same model).

    OMP_NUM_THREADS=1 python benchmarks/program_team/prefix_sharing.py \\
        --json benchmarks/program_team/results/prefix_sharing.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
import team_v1
from runner import run_info

import marft_envs
from marft_algos.cli import ALGORITHMS, build_trainer
from marft_algos.policy import LoraSettings, MultiAgentPolicy, decoding, kv_cache
from marft_algos.policy.critic import Critic
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.rollout.evaluation import evaluation_requests

MODEL = "smollm2-135m-instruct"
#: What the script measures, in order: one iteration of the desk with GRPO (groups of
#: ``--num-generations``) and with action-level MARFT, the desk's greedy evaluation, and one
#: iteration of the README's SmolLM2 GRPO recipe.
PHASES = ("desk_grpo", "desk_marft", "desk_branched", "eval", "recipe")
#: ``desk_branched``: GRPO with the router branched (3 alternatives x 4 continuations), one tree
#: per task, ``BRANCHED_TASKS`` tasks.
BRANCH = {"router": {"width": 3, "rollouts": 4}}
BRANCHED_TASKS = 4
#: The README's SmolLM2 GRPO recipe's env (64 episodes, groups of 4, 128 tokens, lr 5e-4).
RECIPE_ENV = "code-single-v2"
#: Most padded tokens per forward/backward chunk (run_v1.py's value).
MAX_CHUNK_TOKENS = 2048


class Profile:
    """Seconds and counts accumulated by the wrappers of :func:`profiled`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.decoding = False  # inside decode: a prefill is the rollout's

    @contextlib.contextmanager
    def timing(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start


def _wrap(patch: Any, owner: Any, name: str, make: Callable[[Callable[..., Any]], Any]) -> None:
    patch.setattr(owner, name, make(getattr(owner, name)))


@contextlib.contextmanager
def profiled(profile: Profile) -> Iterator[None]:
    """Wrap the library's rollout and update functions to time and count them."""
    with contextlib.ExitStack() as stack:
        patch = stack.enter_context(_monkeypatch())

        def decode_timed(real: Callable[..., Any]) -> Callable[..., Any]:
            def run(model: Any, prompts: Any, **kw: Any) -> Any:
                profile.decoding = True
                try:
                    with profile.timing("rollout/decode_total"):
                        out = real(model, prompts, **kw)
                finally:
                    profile.decoding = False
                profile.counts["prompt_tokens"] += sum(len(p) for p in prompts)
                profile.counts["reply_tokens"] += sum(len(a) for a in out.actions)
                profile.counts["prefill_tokens_run"] += out.prefill_tokens
                profile.counts["generate_calls"] += 1
                return out

            return run

        def prefill_timed(real: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kw: Any) -> Any:
                if profile.decoding:
                    name = "rollout/prefill"
                elif kw.get("hidden"):
                    name = "update/critic_prefill"  # inside update/critic_forward
                else:
                    name = "update/shared_prompts"  # inside the policy's forward passes
                with profile.timing(name):
                    return real(*args, **kw)

            return run

        def logp_timed(real: Callable[..., Any]) -> Callable[..., Any]:
            def run(self: Any, agent: str, prompts: Any, actions: Any, **kw: Any) -> Any:
                if kw.get("reference"):
                    name = "update/reference_forward"
                elif torch.is_grad_enabled():
                    name = "update/policy_forward"
                else:
                    name = "update/policy_no_grad_forward"
                profile.counts[name.replace("update/", "update_rows/")] += len(prompts)
                profile.counts["update_prompt_tokens"] += sum(len(p) for p in prompts)
                with profile.timing(name):
                    return real(self, agent, prompts, actions, **kw)

            return run

        def critic_timed(real: Callable[..., Any]) -> Callable[..., Any]:
            def run(self: Any, *args: Any, **kw: Any) -> Any:
                with profile.timing("update/critic_forward"):
                    return real(self, *args, **kw)

            return run

        def backward_timed(real: Callable[..., Any]) -> Callable[..., Any]:
            def run(self: Any, *args: Any, **kw: Any) -> Any:
                with profile.timing("update/backward"):
                    return real(self, *args, **kw)

            return run

        _wrap(patch, decoding, "decode", decode_timed)
        # decode and the update import these by name from their modules.
        _wrap(patch, kv_cache, "prompt_caches", prefill_timed)
        patch.setattr(sys.modules["marft_algos.policy.generation"], "decode", decoding.decode)
        _wrap(patch, MultiAgentPolicy, "token_log_probs_with_uncut", logp_timed)
        _wrap(patch, Critic, "action_values", critic_timed)
        _wrap(patch, Critic, "token_values", critic_timed)
        _wrap(patch, torch.Tensor, "backward", backward_timed)
        yield


@contextlib.contextmanager
def _monkeypatch() -> Iterator[Any]:
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _policy(args: argparse.Namespace, agents: list[str], path: str) -> MultiAgentPolicy:
    policy = MultiAgentPolicy.from_pretrained(
        args.model,
        agents,
        lora=LoraSettings(r=8, alpha=16),
        seed=args.seed,
        temperature=0.7,
        device=args.device,
    )
    if path == "today":
        policy.shared_prefix_tokens, policy.prefix_store_tokens = None, 0
    Critic.share_prompts = path != "today"
    return policy


def one_iteration(phase: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train one iteration from the untuned model on one path; its metrics and profile."""
    algorithm = "action-marft" if phase == "desk_marft" else "grpo"
    if phase == "recipe":  # the README's SmolLM2 GRPO recipe (code-single-v2), one iteration
        env_id, episodes, generations = RECIPE_ENV, 64, 4
        agents = list(marft_envs.make(RECIPE_ENV).possible_agents)
        lengths: dict[str, Any] = {"max_new_tokens": 128}
        learning_rate = 5e-4
    else:
        env_id, episodes, generations = team_v1.ENV_ID, args.episodes, args.num_generations
        agents = team_v1.AGENTS
        lengths = {
            "max_new_tokens": max(team_v1.TOKENS.values()),
            "max_new_tokens_per_agent": dict(team_v1.TOKENS),
            "max_chunk_tokens": MAX_CHUNK_TOKENS,
        }
        learning_rate = 5e-4
    branch = None
    if phase == "desk_branched":
        branch, generations, episodes = BRANCH, 1, BRANCHED_TASKS * 3 * 4
    settings: dict[str, Any] = dict(
        iterations=1,
        episodes_per_iteration=episodes,
        rollout_threads=episodes,
        temperature=0.7,
        learning_rate=learning_rate,
        eval_every=0,
        eval_episodes=1,  # eval_every=0: never evaluated
        seed=args.seed,
        output_dir=tempfile.mkdtemp(prefix="marft-prefix-bench-"),
        checkpoint_every=0,
        overwrite=True,
        branch=branch,
        **lengths,
    )
    if algorithm == "grpo":
        settings["num_generations"] = generations
    else:
        settings.update(critic_learning_rate=1e-4, entropy_coef=0.0)
    config = ALGORITHMS[algorithm][0](**settings)
    trainer = build_trainer(
        algorithm,
        _policy(args, agents, path),
        lambda: marft_envs.make(env_id, split="train"),
        config,
        critic_seed=args.seed,
    )
    profile = Profile()
    try:
        with profiled(profile):
            start = time.perf_counter()
            records = trainer.train()
            total = time.perf_counter() - start
    finally:
        trainer.close()
    (record,) = [r for r in records if "time/update_s" in r]
    seconds = dict(profile.seconds)
    seconds["rollout/decode_steps"] = seconds.get("rollout/decode_total", 0.0) - seconds.get(
        "rollout/prefill", 0.0
    )
    return {
        "phase": phase,
        "algorithm": algorithm,
        "path": path,
        "seconds": round(total, 2),
        "rollout_s": round(record["time/rollout_s"], 2),
        "update_s": round(record["time/update_s"], 2),
        "reward_mean": record.get("rollout/reward_mean"),
        "prefill_tokens": record.get("rollout/prefill_tokens"),
        "prefill_tokens_saved": record.get("rollout/prefill_tokens_saved"),
        "update_prompt_tokens": record.get("train/prompt_tokens"),
        "update_prompt_tokens_saved": record.get("train/prompt_tokens_saved"),
        "profile_s": {k: round(v, 2) for k, v in sorted(seconds.items())},
        "counts": dict(sorted(profile.counts.items())),
    }


def evaluation(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """The desk's greedy evaluation on ``--eval-tasks`` held-out tasks (50 env copies)."""
    settings = GenerationSettings(
        max_new_tokens=max(team_v1.TOKENS.values()),
        do_sample=False,
        max_new_tokens_per_agent=dict(team_v1.TOKENS),
    )
    policy = _policy(args, team_v1.AGENTS, path)
    make = lambda: marft_envs.make(team_v1.ENV_ID, split="test")  # noqa: E731
    collector = RolloutCollector.from_factory(policy, make, 50, settings, seed=0)
    start = time.perf_counter()
    done = collector.collect(evaluation_requests(collector, args.eval_tasks), settings)
    seconds = time.perf_counter() - start
    for env in collector.envs:
        env.close()
    tokens, saved = policy.prefill.take()
    success = [int(e.info.get("reward_parts", {}).get("success", 0.0)) for e in done]
    return {
        "phase": "eval",
        "path": path,
        "seconds": round(seconds, 2),
        "episodes": len(done),
        "success": sum(success) / len(success),
        "success_by_episode": success,
        "prefill_tokens": tokens,
        "prefill_tokens_saved": saved,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument("--episodes", type=int, default=16, help="desk episodes per iteration")
    parser.add_argument("--num-generations", type=int, default=4, help="GRPO group size")
    parser.add_argument("--eval-tasks", type=int, default=200, help="held-out desk tasks")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of both paths")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="torch device (bfloat16 on cuda)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    team_v1.register()
    runs: list[dict[str, Any]] = []
    for phase in args.phases:
        for r in range(args.repeats):
            paths = ["today", "shared"] if r % 2 == 0 else ["shared", "today"]
            for path in paths:
                if phase == "eval":
                    run = evaluation(path, args)
                else:
                    run = one_iteration(phase, path, args)
                shown = {k: v for k, v in run.items() if k != "success_by_episode"}
                print(json.dumps(shown), flush=True)
                runs.append(run)
    summary = {}
    for phase in args.phases:
        median = {
            path: statistics.median(
                r["seconds"] for r in runs if r["phase"] == phase and r["path"] == path
            )
            for path in ("today", "shared")
        }
        summary[phase] = {**median, "speedup": round(median["today"] / median["shared"], 2)}
    result = {"info": run_info(), "args": {k: str(v) for k, v in vars(args).items()}}
    result.update(summary=summary, runs=runs)
    print(json.dumps(summary, indent=1))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
