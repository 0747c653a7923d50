"""summary.json and the tables of the real-team benchmark, from the job files run.py wrote.

Reads ``<out>/<setting>-seed<k>.json`` and the transcripts in ``<out>/runs/*/samples.jsonl``;
writes ``summary.json`` (the issue's format) next to this file and prints the Markdown tables
that RESULTS.md quotes: accuracies per seed with mean and standard deviation, learning curves, the
noise check, and what the transcripts show (format, length, arithmetic, hand-off).

    python benchmarks/real_team/summarize.py
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any

from marft_algos.samples import read_samples
from marft_envs.math.grading import extract_answer, grade_answer, last_boxed

HERE = Path(__file__).parent
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def last_result(text: str) -> str | None:
    """The number after the last ``=`` of a message (its worked result), if any."""
    if "=" not in text:
        return None
    found = NUMBER.findall(text.rsplit("=", 1)[1])
    return found[0] if found else None


def transcript_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What one evaluation's transcripts show, per agent and for the hand-off."""
    stats: dict[str, Any] = {"episodes": len(rows)}
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        for turn in row["turns"]:
            by_agent.setdefault(turn["agent"], []).append({**turn, "gold": row["info"]["gold"]})
    for agent, turns in sorted(by_agent.items()):
        results = [last_result(t["action"]) for t in turns]
        stats[agent] = {
            "chars_mean": round(statistics.mean(len(t["action"]) for t in turns), 1),
            "cut": round(sum(not t["finished"] for t in turns) / len(turns), 3),
            "boxed": round(sum(last_boxed(t["action"]) is not None for t in turns) / len(turns), 3),
            "has_result": round(sum(r is not None for r in results) / len(turns), 3),
            "result_right": round(
                sum(
                    r is not None and grade_answer(r, t["gold"])
                    for r, t in zip(results, turns, strict=True)
                )
                / len(turns),
                3,
            ),
        }
    if "reasoner" in by_agent:
        lost = fixed = passed = 0
        for row in rows:
            said = {t["agent"]: t["action"] for t in row["turns"]}  # one round: one turn each
            result, boxed = last_result(said["reasoner"]), extract_answer(said["actor"])
            result_right = result is not None and grade_answer(result, row["info"]["gold"])
            passed += result is not None and boxed is not None and grade_answer(boxed, result)
            lost += result_right and not row["correct"]
            fixed += row["correct"] and not result_right
        stats["handoff"] = {
            # The actor's answer is the reasoner's result.
            "actor_boxes_reasoner_result": round(passed / len(rows), 3),
            # The reasoner's result was right but the team's answer was not (lost in the hand-off).
            "right_result_lost": round(lost / len(rows), 3),
            # The team was right although the reasoner's result was wrong or missing.
            "actor_fixed": round(fixed / len(rows), 3),
        }
    return stats


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--summary", type=Path, default=HERE / "summary.json")
    args = parser.parse_args()
    jobs = {p.stem: json.loads(p.read_text()) for p in sorted(args.out.glob("*-seed*.json"))}
    seeds = sorted({j["seed"] for j in jobs.values()})
    by = {(j["setting"], j["seed"]): j for j in jobs.values()}

    def column(setting: str, key: str) -> list[float]:
        return [by[setting, s][key] for s in seeds if (setting, s) in by]

    settings = {
        "dual_untuned": column("dual", "before"),
        "dual_tuned": column("dual", "after"),
        "single_untuned": column("grpo", "before"),
        "single_tuned_ppo": column("ppo", "after"),
        "single_tuned_grpo": column("grpo", "after"),
    }
    if column("ppo", "before") and column("ppo", "before") != settings["single_untuned"]:
        raise SystemExit("The untuned single agent scored differently in the PPO and GRPO jobs.")
    any_job = next(iter(jobs.values()))
    summary = {
        "model": any_job["args"].get("model", "smollm2-135m-instruct"),
        "task": "built-in digits arithmetic, one or two operations (levels 1-2); "
        f"{any_job['eval_episodes']} held-out test-split problems, greedy",
        "seeds": seeds,
        "settings": settings,
        "noise_check": {
            "dual_untuned": column("dual", "noise_before"),
            "dual_tuned": column("dual", "noise_after"),
        },
        "budget": {k: any_job["args"][k] for k in ("iterations", "episodes_per_iteration")}
        | {"tokens_per_problem": 48},
    }
    args.summary.write_text(json.dumps(summary, indent=2) + "\n")

    print("| setting | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | std |")
    print("|---|" + "---|" * (len(seeds) + 2))
    for name, values in list(settings.items()) + [
        (f"noise: {k}", v) for k, v in summary["noise_check"].items()
    ]:
        if values:
            m, sd = mean_std(values)
            cells = " | ".join(f"{100 * v:.0f}%" for v in values)
            print(f"| {name} | {cells} | {100 * m:.1f}% | {100 * sd:.1f} |")
    print("\nLearning curves (held-out greedy accuracy at iteration):")
    for key, job in sorted(jobs.items()):
        curve = ", ".join(f"{it}: {100 * acc:.0f}%" for it, acc in job["curve"])
        reward = ", ".join(f"{100 * r:.0f}" for r in job["rollout_reward"])
        print(f"- {key}: {curve}; rollout reward % per iteration: {reward}; {job['seconds']:.0f} s")
    print("\nTranscripts (first and last evaluation):")
    for key in sorted(jobs):
        rows = read_samples(args.out / "runs" / key)
        iterations = sorted({r["iteration"] for r in rows})
        for it in (iterations[0], iterations[-1]) if iterations else ():
            stats = transcript_stats([r for r in rows if r["iteration"] == it])
            print(f"- {key} iteration {it}: {json.dumps(stats)}")


if __name__ == "__main__":
    main()
