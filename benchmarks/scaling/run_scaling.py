"""Data-parallel scaling on CPU: the main job's iteration time on 1 and on 2 processes.

    python benchmarks/scaling/run_scaling.py [--iterations 6] [--processes 1 2]

Runs ``examples/train_math.py`` (the README main job: action-level MARFT, math-dual-v7, the
built-in model, its demo preset) for a few iterations with one torch thread per process, once as a
plain process and once under ``torchrun --nproc_per_node N``, on the same global batch (64
episodes per iteration). Iteration times come from each run's ``metrics.jsonl`` (``time/rollout_s``,
``time/update_s``, as logged by rank 0), the first iteration left out as warm-up; evaluation is
off so only training is timed. Writes ``results.json`` beside this file and prints a table.
Speed is a ratio taken in one run on one machine, never an absolute claim.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import run_info

ROOT = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(processes: int, iterations: int, out: Path, extra: list[str]) -> dict:
    script = [
        str(ROOT / "examples" / "train_math.py"),
        "--iterations",
        str(iterations),
        "--output-dir",
        str(out),
        "--eval-episodes",
        "1",
        "--eval-every",
        "0",
        "--no-plot",
        "--threads",
        "1",
        *extra,
    ]
    if processes == 1:
        cmd = [sys.executable, *script]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(processes),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(_port()),
            *script,
        ]
    start = time.perf_counter()
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"},
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{processes}-process run failed:\n{done.stderr[-4000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "time/rollout_s" in r][1:]  # drop the warm-up iteration
    rollout = statistics.mean(r["time/rollout_s"] for r in steps)
    update = statistics.mean(r["time/update_s"] for r in steps)
    episodes = steps[0]["rollout/episodes"]
    return {
        "processes": processes,
        "episodes_per_iteration": episodes,
        "rollout_s": rollout,
        "update_s": update,
        "iteration_s": rollout + update,
        "episodes_per_s": episodes / (rollout + update),
        "wall_s": wall,
        "greedy_reward_last": records[-1].get("rollout/reward_mean"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--extra", nargs=argparse.REMAINDER, default=[], help="More train_math.py flags."
    )
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.processes:
            results.append(run(n, args.iterations, Path(tmp) / f"p{n}", args.extra))
            print(json.dumps(results[-1]), flush=True)
    base = results[0]
    for r in results:
        r["speedup"] = base["iteration_s"] / r["iteration_s"]
        r["rollout_speedup"] = base["rollout_s"] / r["rollout_s"]
        r["update_speedup"] = base["update_s"] / r["update_s"]
    record = {"runs": results, "run_info": run_info(["math-dual-v3"], extra_flags=args.extra)}
    (Path(__file__).parent / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"{'processes':>9} {'episodes/s':>10} {'rollout s':>9} {'update s':>8} {'speed-up':>8}")
    for r in results:
        print(
            f"{r['processes']:>9} {r['episodes_per_s']:>10.2f} {r['rollout_s']:>9.2f} {r['update_s']:>8.2f} {r['speedup']:>7.2f}x"
        )


if __name__ == "__main__":
    main()
