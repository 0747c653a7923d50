"""Per-program cost of the code sandbox, against a bare subprocess and in-process ``exec``.

Runs the same reference programs and tests four ways, in one process, interleaved in rounds so
machine load hits each way alike:

- ``exec``: in this process, no isolation at all (the floor);
- ``subprocess``: one plain ``python -I -S -c`` per program, program and tests together (what a
  minimal "run it in a child" grader costs);
- ``sandbox``: :meth:`Sandbox.run`, one program at a time;
- ``sandbox-pool``: :meth:`Sandbox.run_many` over the worker pool (throughput per program).

Usage (from the repository root)::

    python benchmarks/sandbox/overhead.py --programs 60 --rounds 3 [--data-dir DIR] [--json out.json]

The programs are MBPP's (sanitized) reference solutions when ``mbpp_sanitized.json`` is in
``--data-dir`` or ``$MARFT_DATA`` (docs/benchmarks.md, "Data files"), else generated problems.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from marft_envs.code.data import CodeProblem, load_dataset
from marft_envs.code.generator import generate_problems
from marft_envs.sandbox.runner import Sandbox, SandboxLimits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import find_data_file, run_info

MBPP = "mbpp_sanitized.json"


def problems(n: int, mbpp: Path | None) -> list[CodeProblem]:
    if mbpp is not None:
        # MBPP's task 123 alone takes seconds; leave it out so the ratios measure overhead.
        rows = [r for r in json.loads(mbpp.read_text()) if r["task_id"] != 123]
        return list(load_dataset(rows[:n], validate=False))
    return generate_problems(n, seed=0)


def script(p: CodeProblem) -> str:
    return "\n".join([p.program(p.reference or ""), p.setup, *p.tests])


def run_exec(ps: list[CodeProblem]) -> float:
    start = time.perf_counter()
    for p in ps:
        exec(compile(script(p), "<bench>", "exec"), {"__name__": "__main__"})
    return (time.perf_counter() - start) / len(ps)


def run_subprocess(ps: list[CodeProblem]) -> float:
    start = time.perf_counter()
    for p in ps:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", script(p)], capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
    return (time.perf_counter() - start) / len(ps)


def run_sandbox(sandbox: Sandbox, ps: list[CodeProblem]) -> float:
    start = time.perf_counter()
    for p in ps:
        assert sandbox.run(p.program(p.reference or ""), p.unit_tests).all_passed
    return (time.perf_counter() - start) / len(ps)


def run_pool(sandbox: Sandbox, ps: list[CodeProblem]) -> float:
    start = time.perf_counter()
    results = sandbox.run_many([(p.program(p.reference or ""), p.unit_tests) for p in ps])
    assert all(r.all_passed for r in results)
    return (time.perf_counter() - start) / len(ps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=60, help="reference programs per round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds (each way runs once per round)"
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="sandbox pool size (default: CPUs, at most 8)"
    )
    parser.add_argument("--data-dir", default=None, help=f"folder holding {MBPP} ($MARFT_DATA)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    mbpp = find_data_file(MBPP, args.data_dir)
    ps = problems(args.programs, mbpp)
    sandbox = Sandbox(SandboxLimits(), max_workers=args.workers)
    times: dict[str, list[float]] = {
        "exec": [],
        "subprocess": [],
        "sandbox": [],
        "sandbox-pool": [],
    }
    for _ in range(args.rounds):
        times["exec"].append(run_exec(ps))
        times["subprocess"].append(run_subprocess(ps))
        times["sandbox"].append(run_sandbox(sandbox, ps))
        times["sandbox-pool"].append(run_pool(sandbox, ps))
    sandbox.close()

    source = "MBPP (sanitized) references" if mbpp is not None else "generated problems"
    print(
        f"{len(ps)} {source}, {args.rounds} rounds, isolation={sandbox.isolation}, "
        f"workers={sandbox.max_workers}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print()
    print("| way | median ms/program | x subprocess |")
    print("|---|---|---|")
    base = statistics.median(times["subprocess"])
    for way, values in times.items():
        median = statistics.median(values)
        print(f"| {way} | {1000 * median:.1f} | {median / base:.2f} |")
    if args.json is not None:
        record = {
            "programs": len(ps),
            "source": source,
            "rounds": args.rounds,
            "isolation": sandbox.isolation,
            "workers": sandbox.max_workers,
            "seconds_per_program": times,
            "run_info": run_info(["code-single-v2"]),
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
