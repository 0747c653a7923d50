"""benchmarks/gpu/suite.py: the dry run (every step on the CPU, tiny settings) records every step
as ok or skipped with a reason and writes the table; a step cut at its limit leaves the others."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "benchmarks" / "gpu" / "suite.py"
STEPS = [
    "env",
    "main_job",
    "trl_smollm2",
    "trl_1_5b",
    "vllm",
    "update_memory",
    "decode",
    "fsdp",
    "prefix_sharing",
]


def run_suite(out: Path, *extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, str(SUITE), "--dry-run", "--out", str(out), *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow  # about 70 s on two cores; test_a_step_cut_at_its_limit_... runs the suite too
def test_dry_run_records_every_step_and_the_table(tmp_path: Path) -> None:
    # The sharded step launches 2 processes: on a loaded CPU its dry run needs more than the
    # GPU limit.
    results = run_suite(
        tmp_path / "out", "--scratch", str(tmp_path / "scratch"), "--limits", "fsdp=240"
    )
    assert list(results["steps"]) == STEPS
    for name, record in results["steps"].items():
        assert record["status"] in ("ok", "skipped"), (name, record)
        if record["status"] == "skipped":
            assert record["reason"], name
        assert (tmp_path / "out" / f"{name}.log").is_file()
    steps = results["steps"]
    assert steps["vllm"]["status"] == "skipped"
    if importlib.util.find_spec("trl") is None:
        for name in ("trl_smollm2", "trl_1_5b"):
            assert steps[name]["status"] == "skipped" and "trl" in steps[name]["reason"]
    assert steps["env"]["result"]["packages"]["torch"]
    main_job = steps["main_job"]["result"]
    assert main_job["iterations"] == 1 and len(main_job["greedy_accuracy"]) >= 2
    assert steps["update_memory"]["result"]["checkpointed"]["formula_total_gb"] > 0
    assert steps["decode"]["result"]["batch_64"]["step_ms"] > 0
    assert steps["fsdp"]["result"]["iterations"] == 2  # gloo on the CPU in the dry run
    assert steps["prefix_sharing"]["result"]["summary"]["desk_grpo"]["shared"] > 0
    table = (tmp_path / "out" / "results.md").read_text()
    assert all(f"| {name} |" in table for name in STEPS)


def test_a_step_cut_at_its_limit_leaves_the_next_one(tmp_path: Path) -> None:
    results = run_suite(tmp_path / "out", "--steps", "main_job", "vllm", "--limits", "main_job=1")
    cut, after = results["steps"]["main_job"], results["steps"]["vllm"]
    assert cut["status"] == "timeout" and "limit" in cut["reason"]
    assert after["status"] == "skipped" and after["reason"]
    assert "| main_job | timeout |" in (tmp_path / "out" / "results.md").read_text()
