"""The first-run recipe on a new family (``docs/real_model.md``, "A first run on a new family:
code"): GRPO on ``code-single-v2`` with SmolLM2-135M-Instruct and the env's own prompt.

Runs the documented ``marft train`` command once per seed and keeps, in
``benchmarks/real_model/code_recipe/<env>/seedN/``, the run's held-out outcomes
(``eval_outcomes.jsonl``: every held-out task right or wrong, before and after), its metrics and a
``summary.json`` with the paired counts and the wall time. ``--env code-dual-v2`` runs the same
command on the tester -> coder team.

    python benchmarks/real_model/code_recipe.py --seeds 0 1 2
    python benchmarks/real_model/code_recipe.py --env code-dual-v2 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from marft_algos.rollout.paired import paired_comparison

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "code_recipe"

#: The command as the docs give it (``tests/docs/test_recipe_commands.py`` checks they agree).
COMMAND = (
    "marft train --env code-single-v2 --model smollm2-135m-instruct --algo grpo --iterations 6 "
    "--learning-rate 5e-4 --max-new-tokens 128 --episodes-per-iteration 64 --num-generations 4 "
    "--eval-episodes 100"
)


def command(env: str = "code-single-v2") -> str:
    """The documented command, on ``env``."""
    return COMMAND.replace("--env code-single-v2", f"--env {env}")


def summarize(run: Path, seed: int, seconds: float | None, env: str = "code-single-v2") -> dict:
    """Before/after counts of a finished run folder, paired on its held-out tasks."""
    rows = [json.loads(line) for line in (run / "eval_outcomes.jsonl").open()]
    before = [bool(e["correct"]) for e in rows[0]["episodes"]]
    after = [bool(e["correct"]) for e in rows[-1]["episodes"]]
    paired = paired_comparison(before, after)
    return {
        "seed": seed,
        "command": f"{command(env)} --seed {seed}",
        "episodes": paired.n,
        "right_before": sum(before),
        "right_after": sum(after),
        "wrong_to_right": paired.wrong_to_right,
        "right_to_wrong": paired.right_to_wrong,
        "iterations": rows[-1]["iteration"],
        "wall_seconds": seconds,
    }


def record(run: Path, seed: int, seconds: float | None, env: str = "code-single-v2") -> dict:
    """Copy a run's outcome files into ``code_recipe/<env>/seed<seed>`` with its summary."""
    target = RECORDS / env / f"seed{seed}"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("eval_outcomes.jsonl", "metrics.jsonl"):
        shutil.copyfile(run / name, target / name)
    summary = summarize(run, seed, seconds, env)
    (target / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--env", default="code-single-v2", choices=["code-single-v2", "code-dual-v2"]
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args(argv)
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            argv_run = [
                *command(args.env).split()[2:],
                "--seed",
                str(seed),
                "--output-dir",
                str(run),
            ]
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "marft_algos.cli", "train", *argv_run], check=True
            )
            summary = record(run, seed, round(time.perf_counter() - start, 1), args.env)
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
