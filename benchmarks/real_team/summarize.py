"""summary.json and the tables of the real-team benchmark, from the job files run.py wrote.

Reads ``<out>/<setting>-seed<k>.json`` and the transcripts in ``<out>/runs/*/samples.jsonl``
(kept compact in ``<out>/transcripts.jsonl``, which it reads when the run folders are not there);
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
import sys
from pathlib import Path
from typing import Any

from marft_algos.runs.samples import read_samples
from marft_envs.math.grading import extract_answer, grade_answer, last_boxed, normalize_answer
from marft_envs.math.grading.compare import is_number_literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import run_info

HERE = Path(__file__).parent
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def states_a_number(response: str) -> bool:
    """Whether the graded answer of a response is a number (after its last ``=``, if any).

    The v2 math grader, which graded the runs of RESULTS.md, compared values only, so it also
    paid an unevaluated expression: answering "Compute 6 \\times 8 - 9." with the problem's own
    "6 \\times 8 - 9" earned the reward for 39. Since v3 the grader wants a number for a numeric
    answer (:func:`~marft_envs.math.grading.states_the_number`); this re-grades v2 transcripts by
    the same rule, so the strict accuracy counts a right answer only when it states the number.
    """
    answer = extract_answer(response)
    if answer is None:
        return False
    return is_number_literal(normalize_answer(answer.rsplit("=", 1)[-1]))


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
    # The graded answer is the actor's, last in every setting; each is read once.
    stated = [states_a_number(row["turns"][-1]["action"]) for row in rows]
    right = [bool(row["correct"]) for row in rows]
    stats["restated"] = round(
        sum(r and not n for r, n in zip(right, stated, strict=True)) / len(rows), 3
    )
    stats["strict_accuracy"] = round(
        sum(r and n for r, n in zip(right, stated, strict=True)) / len(rows), 3
    )
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


def compact(key: str, row: dict[str, Any]) -> dict[str, Any]:
    """A transcript of samples.jsonl without the prompts: the problem, each action, the grade."""
    prompt = row["turns"][0]["messages"][-1]["content"]
    return {
        "job": key,
        "iteration": row["iteration"],
        "episode": row["episode"],
        "problem": prompt.split("\n\n")[0].removeprefix("Problem: "),
        "info": {"gold": row["info"]["gold"]},
        "correct": row["correct"],
        "turns": [
            {"agent": t["agent"], "action": t["action"], "finished": t["finished"]}
            for t in row["turns"]
        ],
    }


def load_transcripts(out: Path, keys: list[str], path: Path) -> list[dict[str, Any]]:
    """The first and last evaluation of every job, from the run folders when they are here
    (then also written to ``path``), else from ``path``."""
    if not all((out / "runs" / key / "samples.jsonl").is_file() for key in keys):
        return [json.loads(line) for line in path.read_text().splitlines()]
    rows = []
    for key in keys:
        samples = read_samples(out / "runs" / key)
        first, last = min(r["iteration"] for r in samples), max(r["iteration"] for r in samples)
        rows += [compact(key, r) for r in samples if r["iteration"] in (first, last)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--summary", type=Path, default=HERE / "summary.json")
    args = parser.parse_args()
    jobs = {p.stem: json.loads(p.read_text()) for p in sorted(args.out.glob("*-seed*.json"))}
    seeds = sorted({j["seed"] for j in jobs.values()})
    by = {(j["setting"], j["seed"]): j for j in jobs.values()}
    transcripts = load_transcripts(args.out, sorted(jobs), args.out / "transcripts.jsonl")
    stats = {}
    for key in sorted(jobs):
        mine = [r for r in transcripts if r["job"] == key]
        its = sorted({r["iteration"] for r in mine})
        stats[key] = {it: transcript_stats([r for r in mine if r["iteration"] == it]) for it in its}

    def column(setting: str, key: str) -> list[float]:
        return [by[setting, s][key] for s in seeds if (setting, s) in by]

    def strict(setting: str, when: int) -> list[float]:
        return [
            list(stats[f"{setting}-seed{s}"].values())[when]["strict_accuracy"]
            for s in seeds
            if (setting, s) in by
        ]

    settings = {
        "dual_untuned": column("dual", "before"),
        "dual_tuned": column("dual", "after"),
        "single_untuned": column("grpo", "before"),
        "single_tuned_ppo": column("ppo", "after"),
        "single_tuned_grpo": column("grpo", "after"),
    }
    if any(
        by["ppo", s]["before"] != by["grpo", s]["before"]
        for s in seeds
        if ("ppo", s) in by and ("grpo", s) in by
    ):
        raise SystemExit("The untuned single agent scored differently in the PPO and GRPO jobs.")
    strict_settings = {
        "dual_untuned": strict("dual", 0),
        "dual_tuned": strict("dual", -1),
        "single_untuned": strict("grpo", 0),
        "single_tuned_ppo": strict("ppo", -1),
        "single_tuned_grpo": strict("grpo", -1),
    }
    any_job = next(iter(jobs.values()))
    summary = {
        "model": any_job["args"].get("model", "smollm2-135m-instruct"),
        "task": "built-in digits arithmetic, one or two operations (levels 1-2); "
        f"{any_job['eval_episodes']} held-out test-split problems, greedy",
        "seeds": seeds,
        "settings": settings,
        # The same evaluations, counting a right answer only when it states the number (see
        # states_a_number: the v2 grader also rewards the problem's own expression restated).
        "settings_number_answers_only": strict_settings,
        "noise_check": {
            "dual_untuned": column("dual", "noise_before"),
            "dual_tuned": column("dual", "noise_after"),
        },
        "budget": {k: any_job["args"][k] for k in ("iterations", "episodes_per_iteration")}
        | {"tokens_per_problem": 48},
    }
    summary["run_info"] = run_info(["math-dual-v3", "math-single-v3"])  # of the summary's run
    args.summary.write_text(json.dumps(summary, indent=2) + "\n")

    for title, table in (
        ("Held-out accuracy as the env grades it", settings),
        ("Number answers only", strict_settings),
        ("Noise check (the team, reasoner's messages replaced by noise)", summary["noise_check"]),
    ):
        print(f"\n{title}:\n")
        print("| setting | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | std |")
        print("|---|" + "---|" * (len(seeds) + 2))
        for name, values in table.items():
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
    for key, by_iteration in stats.items():
        for it, numbers in by_iteration.items():
            print(f"- {key} iteration {it}: {json.dumps(numbers)}")


if __name__ == "__main__":
    main()
