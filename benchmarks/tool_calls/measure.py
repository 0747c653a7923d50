"""Well-formed tool calls and task success on the 60 held-out lookup tasks (``tool_task.py``).

    python benchmarks/tool_calls/measure.py untuned          # the three ids, greedy and T = 1
    python benchmarks/tool_calls/measure.py tuned RUN_DIR    # a run's newest checkpoint and the
                                                             # untuned model, greedy, paired

A reply counts as a well-formed tool call when ``parse_hermes`` (the env's parser) turns it into
at least one call, every call naming an offered tool; it is read off the first reply of each
episode here, independently of the program's own ``tool_call`` part (the two must agree).
Writes ``results/<name>.json`` with every episode's replies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tool_task
from runner import run_info

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.rollout.evaluation import evaluation_requests
from marft_envs.programs.tools import parse_hermes

HERE = Path(__file__).resolve().parent
MODEL = "smollm2-135m-instruct"
MAX_NEW_TOKENS = 48
SEED = 0


def first_reply_is_call(text: str) -> bool:
    """The measure: ``parse_hermes`` finds calls (valid JSON, object arguments), all offered."""
    _, calls = parse_hermes(text)
    return bool(calls) and all(name in tool_task.OFFERED for name, _ in calls)


def measure(
    policy: Any, env_id: str, settings: GenerationSettings, episodes: int
) -> dict[str, Any]:
    """Run the held-out tasks 0..episodes-1 once each; the rates and every episode's replies."""
    start = time.perf_counter()
    make = lambda: marft_envs.make(env_id, split="test")  # noqa: E731
    collector = RolloutCollector.from_factory(policy, make, min(episodes, 30), settings, seed=SEED)
    done = collector.collect(evaluation_requests(collector, episodes), settings)
    for env in collector.envs:
        env.close()
    rows = []
    for e in done:
        parts = e.info.get("reward_parts", {})
        replies = [d.text for d in e.decisions]
        rows.append(
            {
                "task": e.options.get("index"),
                "well_formed_call": first_reply_is_call(replies[0]) if replies else False,
                "tool_call_part": parts.get("tool_call", 0.0),
                "right_call": parts.get("right_call", 0.0),
                "success": parts.get("success", 0.0),
                "first_cut": not e.decisions[0].finished if e.decisions else None,
                "replies": replies,
                "error": e.info.get("program_error"),
            }
        )
    n = len(rows)
    summary = {
        "episodes": n,
        "well_formed_call": sum(r["well_formed_call"] for r in rows) / n,
        "right_call": sum(r["right_call"] for r in rows) / n,
        "success": sum(r["success"] for r in rows) / n,
        "program_errors": sum(r["error"] is not None for r in rows),
        "parser_and_program_agree": all(
            r["well_formed_call"] == bool(r["tool_call_part"]) for r in rows
        ),
        "seconds": round(time.perf_counter() - start, 1),
    }
    return {"summary": summary, "episodes": rows}


def greedy_settings(max_new_tokens: int) -> GenerationSettings:
    return GenerationSettings(max_new_tokens=max_new_tokens, do_sample=False)


def sampled_settings(max_new_tokens: int) -> GenerationSettings:
    return GenerationSettings(max_new_tokens=max_new_tokens, temperature=1.0, do_sample=True)


def untuned(args: argparse.Namespace) -> dict[str, Any]:
    policy = MultiAgentPolicy.from_pretrained(args.model, [tool_task.AGENT], seed=SEED)
    out: dict[str, Any] = {}
    for env_id in args.envs:
        for name, settings in (
            ("greedy", greedy_settings(args.max_new_tokens)),
            ("sampled_T1", sampled_settings(args.max_new_tokens)),
        ):
            result = measure(policy, env_id, settings, args.episodes)
            print(env_id, name, json.dumps(result["summary"]), flush=True)
            out[f"{env_id}/{name}"] = result
    return out


def tuned(args: argparse.Namespace) -> dict[str, Any]:
    from marft_algos.runs.checkpoint import newest_valid_checkpoint, policy_from_checkpoint

    checkpoint, _ = newest_valid_checkpoint(args.run)
    if checkpoint is None:
        raise SystemExit(f"{args.run} holds no valid checkpoint; train with marft train first.")
    policy = policy_from_checkpoint(checkpoint)
    base = MultiAgentPolicy.from_pretrained(args.model, [tool_task.AGENT], seed=SEED)
    settings = greedy_settings(args.max_new_tokens)
    out: dict[str, Any] = {"checkpoint": str(checkpoint)}
    for name, team in (("before", base), ("after", policy)):
        result = measure(team, args.env, settings, args.episodes)
        print(args.env, name, json.dumps(result["summary"]), flush=True)
        out[name] = result
    before, after = out["before"]["episodes"], out["after"]["episodes"]
    for key in ("well_formed_call", "success"):
        pairs = [(bool(b[key]), bool(a[key])) for b, a in zip(before, after, strict=True)]
        out[f"paired_{key}"] = {
            "wrong_to_right": sum(not b and a for b, a in pairs),
            "right_to_wrong": sum(b and not a for b, a in pairs),
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["untuned", "tuned"])
    parser.add_argument("run", nargs="?", type=Path, help="tuned: the marft train run folder")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--env", default=tool_task.RECIPE_ID, help="tuned: the env measured")
    parser.add_argument(
        "--envs", nargs="+", default=list(tool_task.EXAMPLES), help="untuned: the envs measured"
    )
    parser.add_argument("--episodes", type=int, default=tool_task.NUM_TEST_TASKS)
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="default: results/<what>.json")
    args = parser.parse_args(argv)
    if args.what == "tuned" and args.run is None:
        parser.error("tuned needs the run folder: measure.py tuned RUN_DIR")
    torch.set_num_threads(args.threads)
    tool_task.check_split()
    result = untuned(args) if args.what == "untuned" else tuned(args)
    result.update(model=args.model, max_new_tokens=args.max_new_tokens, seed=SEED)
    result["run_info"] = run_info(
        list(tool_task.EXAMPLES), argv=sys.argv[1:] if argv is None else argv
    )
    out = args.out or HERE / "results" / f"{args.what}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
