"""What ``marft eval RUN --attribution`` costs against a plain ``marft eval RUN``.

    python examples/train_math.py                                  # the main job's run folder
    python benchmarks/attribution/eval_cost.py --run runs/train_math --repeats 2 --json benchmarks/attribution/results.json

A plain ``marft eval`` evaluates two settings on the held-out episodes (the checkpoint and the
untuned team, for the paired before → after line); ``--attribution`` with two agents evaluates four
(every agent tuned, none, and each alone reverted), reusing greedy generations that repeat across
settings. Both run in this process through :func:`marft_algos.cli.evaluate.evaluate_checkpoint`,
back to back, alternating, ``--repeats`` times after an untimed warm-up (each timing includes
loading the policy from the checkpoint, as the command does); the ratio is attribution time over
plain time of the same repeat (the target is below 2). One torch thread (the run's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from runner import run_info  # noqa: E402

from marft_algos.cli.evaluate import EvalArguments, evaluate_checkpoint, find_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/train_math", help="a marft train run folder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the results to this file")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: must be >= 1.")
    checkpoint = find_checkpoint(args.run)
    evaluate_checkpoint(checkpoint, EvalArguments(episodes=8))  # warm-up, not timed
    plain_s, attribution_s, generations = [], [], {}
    for _ in range(args.repeats):
        start = time.perf_counter()
        plain = evaluate_checkpoint(checkpoint, EvalArguments())
        plain_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        attributed = evaluate_checkpoint(checkpoint, EvalArguments(attribution=True))
        attribution_s.append(time.perf_counter() - start)
        generations = attributed["attribution"]["generations"]
        # The same checkpoint, episodes and greedy decoding: the shared settings agree.
        assert attributed["eval/accuracy"] == plain["eval/accuracy"]
        assert attributed["before/accuracy"] == plain["before/accuracy"]
    ratios = [a / p for a, p in zip(attribution_s, plain_s, strict=True)]
    result = {
        "checkpoint": checkpoint.name,
        "episodes": plain["eval/episodes"],
        "plain_s": [round(s, 2) for s in plain_s],
        "attribution_s": [round(s, 2) for s in attribution_s],
        "ratio_per_repeat": [round(r, 3) for r in ratios],
        "ratio_mean": round(statistics.mean(ratios), 3),
        "generations": generations,
        "settings": [r["setting"] for r in attributed["attribution"]["greedy"]],
        "run_info": run_info(),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "run_info"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
