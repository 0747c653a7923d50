"""Run one ``marft train --config`` YAML over seeds, a few jobs at a time, into one results file.

    python benchmarks/sweep.py benchmarks/configs/main_job.yaml --seeds 0 1 2 --jobs 2
    python benchmarks/sweep.py benchmarks/configs/comparison/dual-action-marft.yaml \\
        --seeds 0 --output-dir runs/smoke -- --iterations 1 --eval-episodes 8   # a smoke run

Each seed runs ``marft train --config CONFIG --seed K --output-dir OUT/seed<K>`` in its own process
(one torch thread each unless the config or the extra flags say otherwise) with its log in
``OUT/seed<K>.log``; flags after ``--`` go to every run and override the config. ``OUT``
defaults to ``runs/sweeps/<config name>``. When every seed has finished, ``OUT/sweep.json`` holds
each seed's final held-out accuracy (``eval/accuracy`` of its last evaluation), its wall time
and return code, their mean and sample standard deviation, and ``run_info`` (commit, env ids,
package versions, machine; ``benchmarks/runner.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from runner import run_info  # noqa: E402


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The sweep's own options, and the flags after ``--`` that go to every ``marft train``."""
    argv = list(argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="YAML file for marft train --config.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Default: 0 1 2.")
    parser.add_argument("--jobs", type=int, default=1, help="Runs at a time (default 1).")
    parser.add_argument(
        "--output-dir", default=None, help="Default: runs/sweeps/<config file name without .yaml>."
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: run at least one job at a time (--jobs 1 or more).")
    if not Path(args.config).is_file():
        parser.error(f"{args.config}: no such config file (see benchmarks/configs/).")
    return args, extra


def train_command(config: str, seed: int, output_dir: Path, extra: Sequence[str]) -> list[str]:
    """The ``marft train`` command line of one seed."""
    return [
        sys.executable,
        "-m",
        "marft_algos.cli",
        "train",
        "--config",
        config,
        "--seed",
        str(seed),
        "--output-dir",
        str(output_dir),
        "--progress",
        "plain",
        "--overwrite",
        *extra,
    ]


def final_accuracy(run_dir: Path) -> float | None:
    """``eval/accuracy`` of the run's last evaluation (None if it never evaluated)."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return None
    last = None
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if "eval/accuracy" in record:
            last = float(record["eval/accuracy"])
    return last


def run_seed(config: str, seed: int, out: Path, extra: Sequence[str]) -> dict[str, Any]:
    """Train one seed; its record for ``sweep.json``."""
    run_dir = out / f"seed{seed}"
    command = train_command(config, seed, run_dir, extra)
    start = time.perf_counter()
    with open(out / f"seed{seed}.log", "w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
    return {
        "seed": seed,
        "returncode": code,
        "wall_s": round(time.perf_counter() - start, 1),
        "final_accuracy": final_accuracy(run_dir),
        "output_dir": run_dir.name,
    }


def portable(path: str) -> str:
    """``path`` relative to the repository when it lies inside it (no machine's folders in results)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return Path(path).name


def config_env_ids(config: str) -> list[str]:
    """The env id the config trains on (marft train's default when it names none)."""
    import yaml

    from marft_algos.cli.train import TrainArguments

    values = yaml.safe_load(Path(config).read_text()) or {}
    return [str(values.get("env", TrainArguments.env))]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every seed, then write and return ``sweep.json``'s contents."""
    args, extra = parse_args(sys.argv[1:] if argv is None else argv)
    out = Path(args.output_dir or Path("runs") / "sweeps" / Path(args.config).stem)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = list(pool.map(lambda s: run_seed(args.config, s, out, extra), args.seeds))
    finals = [r["final_accuracy"] for r in runs if r["final_accuracy"] is not None]
    summary = {
        "config": portable(args.config),
        "extra_flags": extra,
        "seeds": args.seeds,
        "jobs": args.jobs,
        "runs": runs,
        "final_accuracy_mean": statistics.fmean(finals) if finals else None,
        "final_accuracy_std": statistics.stdev(finals) if len(finals) > 1 else None,
        "wall_s": round(time.perf_counter() - started, 1),
        "run_info": run_info(config_env_ids(args.config)),
    }
    (out / "sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    for r in runs:
        acc = "—" if r["final_accuracy"] is None else f"{100 * r['final_accuracy']:.1f}%"
        print(f"seed {r['seed']}: held-out accuracy {acc}, {r['wall_s']} s, exit {r['returncode']}")
    print(f"wrote {out / 'sweep.json'}")
    failed = [r["seed"] for r in runs if r["returncode"] != 0]
    if failed:
        raise SystemExit(f"seeds {failed} failed; see {out}/seed<K>.log")
    return summary


if __name__ == "__main__":
    main()
