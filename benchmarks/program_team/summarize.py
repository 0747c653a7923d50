"""Summarize the support-desk jobs from their run folders: ``summary.json`` and the table rows of
RESULTS.md.

Reads every ``<results>/<setting>-seed<k>/`` folder (``metrics.jsonl``, the transcripts in
``samples.jsonl`` or ``samples.jsonl.gz``, and ``error.txt`` for a job that stopped). A job's
held-out numbers come from its greedy evaluations: the first (iteration 0, the untuned team) and
the last. The hand-off statistics are read off the transcripts of those evaluations, 200
episodes each:

- ``parse_failure``: the router's reply held no JSON object with a known route;
- ``routed``: the route was the request's department (of all episodes), and
  ``success_given_right_route``: the success of those episodes (the specialists' and reviewer's
  part);
- ``false_approval`` / ``false_rejection``: of the episodes where the reviewer judged an answer,
  the share where it approved a wrong first answer / sent back a right one;
- ``calls``: model calls per episode, and ``calls_per_agent``;
- ``routes``: the share of episodes whose first reply (the router's, or the single agent's
  first call) handed the request to each department, and ``None`` where it named none.

A job that stopped before its last iteration is listed with ``status`` and its error, and its
accuracy is ``null``: it is not counted as a result.

    python benchmarks/program_team/summarize.py benchmarks/program_team/results/h100
    python benchmarks/program_team/summarize.py benchmarks/program_team/results/v1/runs \
        --task support-desk-v1 --out benchmarks/program_team/results/v1/summary.json

For ``support-desk-v1`` and ``-v2`` the settings include ``single`` (one agent making every
call), and each complete job also gets ``paired``: McNemar's exact test of its first and last
evaluations on the same held-out episodes (``eval_outcomes.jsonl``). ``support-desk-v2`` adds
``grpo-plain`` (v1's GRPO recipe; ``grpo`` is GRPO with the router branched) and reads the
untuned team from its ``untuned-seed0`` job when there is one::

    python benchmarks/program_team/summarize.py benchmarks/program_team/results/v2 \
        --task support-desk-v2
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path
from typing import Any

from desk_handoffs import handoffs

from marft_algos.runs.outcomes import paired_before_after

SETTINGS = {"marft": "team_marft", "grpo": "team_critic_free", "independent": "independent"}
#: support-desk-v1 adds the single-agent reference (the same program, one adapter).
SETTINGS_V1 = {**SETTINGS, "single": "single_agent"}
#: support-desk-v2: GRPO with the router branched, and v1's plain GRPO recipe beside it.
SETTINGS_V2 = {
    "marft": "team_marft",
    "grpo": "team_grpo_branched",
    "grpo-plain": "team_critic_free",
    "independent": "independent",
    "single": "single_agent",
}
TASK_SETTINGS = {
    "support-desk-v0": SETTINGS,
    "support-desk-v1": SETTINGS_V1,
    "support-desk-v2": SETTINGS_V2,
}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def job(folder: Path) -> dict[str, Any]:
    """One job's status, curve and before/after statistics."""
    # The job's own record beside its folder (run_v1.py, run_v2.py: env id, wall time) and,
    # where it was run, its attribution table (attribution_v1.py, run_v2.py --attribution).
    # run_v2.py keeps its run folders in ``<out>/runs/``, its records in ``<out>/``.
    records_at = (
        folder.parent / f"{folder.name}.json",
        folder.parent.parent / f"{folder.name}.json",
    )
    beside = next((p for p in records_at if p.is_file()), None)
    own = json.loads(beside.read_text()) if beside is not None else {}
    # An ``untuned`` job (support-desk-v2) only evaluates: no config or metrics are written, and
    # its one evaluation (in its own record's curve) is both before and after.
    evaluation_only = folder.name.startswith("untuned-")
    if evaluation_only:
        config: dict[str, Any] = {"iterations": 0}
        records = [{"iteration": i, "eval/accuracy": a} for i, a in own.get("curve", [])]
    else:
        config = json.loads((folder / "config.json").read_text())
        records = read_jsonl(folder / "metrics.jsonl")
    samples_path = next(folder.glob("samples.jsonl*"))
    by_iteration: dict[int, list[dict[str, Any]]] = {}
    for episode in read_jsonl(samples_path):
        by_iteration.setdefault(episode["iteration"], []).append(episode)
    evals = [r for r in records if "eval/accuracy" in r]
    last_iteration = max((r.get("iteration", 0) for r in records), default=0)
    error = folder / "error.txt"
    complete = evaluation_only or (
        last_iteration == config["iterations"] and evals[-1]["iteration"] == last_iteration
    )
    first, last = min(by_iteration), max(by_iteration)
    paired = paired_before_after(folder, evals[0]["iteration"], evals[-1]["iteration"])
    attribution = folder.parent / f"attribution-{folder.name}.json"
    table = own.get("attribution")
    if attribution.is_file():
        table = json.loads(attribution.read_text())
    status = "complete" if complete else f"stopped after iteration {last_iteration}"
    return {
        "env_id": own.get("env_id"),
        "seconds": own.get("seconds"),
        "peak_memory_gb": own.get("peak_memory_gb"),
        # run_v2.py writes "not finished" first, then the table once it is done.
        "attribution": table.get("attribution") if isinstance(table, dict) else table,
        "status": "evaluation only" if evaluation_only else status,
        "error": error.read_text().strip()[:200] if error.exists() else None,
        "before": evals[0]["eval/accuracy"],
        "after": evals[-1]["eval/accuracy"] if complete else None,
        "curve": [[r["iteration"], r["eval/accuracy"]] for r in evals],
        "rollout_reward": [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r],
        "rollout_parsed": [
            r["rollout/reward/parsed"] for r in records if "rollout/reward/parsed" in r
        ],
        # The learning curve's right route (the router's own part of it).
        "rollout_routed": [
            r["rollout/reward/routed"] for r in records if "rollout/reward/routed" in r
        ],
        "handoffs_before": handoffs(by_iteration[first]),
        "handoffs_after": handoffs(by_iteration[last]) if complete else None,
        "paired": paired.__dict__ if paired and complete else None,
    }


def mean_std(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None}
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="the folder of <setting>-seed<k> run folders")
    parser.add_argument("--out", type=Path, default=None, help="default: <results>/summary.json")
    parser.add_argument("--device", default="one NVIDIA H100 80GB, bfloat16 weights")
    parser.add_argument("--task", default="support-desk-v0", choices=sorted(TASK_SETTINGS))
    parser.add_argument(
        "--not-run",
        nargs=2,
        action="append",
        default=[],
        metavar=("JOB", "REASON"),
        help="a planned job that did not run, and why (recorded in summary.json)",
    )
    args = parser.parse_args(argv)
    jobs: dict[str, dict[int, dict[str, Any]]] = {}
    for folder in sorted(args.results.glob("*-seed*")):
        if not folder.is_dir() or folder.name.startswith("attribution-"):
            continue
        if not folder.name.startswith("untuned-") and not (folder / "metrics.jsonl").is_file():
            print(f"{folder.name}: no metrics.jsonl yet (a job still running?); left out")
            continue
        setting, _, seed = folder.name.partition("-seed")
        jobs.setdefault(setting, {})[int(seed)] = job(folder)
    seeds = sorted({s for per in jobs.values() for s in per})
    # The untuned team: an ``untuned`` job's evaluation, else the marft jobs' first evaluations
    # (greedy, adapters at zero: the same team).
    reference = jobs.get("untuned") or jobs["marft"]
    untuned = [next(iter(reference.values()))["before"]] * len(seeds)
    if "untuned" not in jobs:
        untuned = [jobs["marft"][s]["before"] for s in seeds if s in jobs["marft"]]
    summary: dict[str, Any] = {
        "model": "smollm2-135m-instruct",
        "task": args.task,
        "env_ids": sorted(
            {j["env_id"] for per in jobs.values() for j in per.values() if j["env_id"]}
        ),
        "device": args.device,
        "not_run": {job: reason for job, reason in args.not_run},
        "seeds": seeds,
        "settings": {"team_untuned": untuned},
        "rates": {},
        "jobs": {},
    }
    summary["rates"]["team_untuned"] = next(iter(reference.values()))["handoffs_before"]
    if "untuned" in jobs:
        summary["jobs"]["untuned"] = jobs["untuned"]
    for setting, key in TASK_SETTINGS[args.task].items():
        per = jobs.get(setting, {})
        summary["settings"][key] = [per[s]["after"] if s in per else None for s in seeds]
        summary["rates"][key] = {s: per[s]["handoffs_after"] for s in seeds if s in per}
        summary["jobs"][setting] = per
    summary["accuracy"] = {
        key: mean_std([v for v in values if v is not None])
        for key, values in summary["settings"].items()
    }
    out = args.out or args.results / "summary.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    for key, values in summary["settings"].items():
        print(f"{key:18s} {values}  {summary['accuracy'][key]}")
    for setting, per in jobs.items():
        for seed, row in per.items():
            after = row["handoffs_after"] or {}
            print(
                f"{setting}:{seed} {row['status']:28s} before {row['before']:.3f} "
                f"parse-fail {row['handoffs_before']['parse_failure']:.3f} -> "
                f"{after.get('parse_failure', float('nan')):.3f}, calls "
                f"{row['handoffs_before']['calls']:.2f} -> {after.get('calls', float('nan')):.2f}"
            )


if __name__ == "__main__":
    main()
