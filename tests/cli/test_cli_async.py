"""An asynchronous run (``--max-staleness 1``) killed with -9 mid-run: its rollout worker goes
with it, and the resumed run logs exactly what the uninterrupted one logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from budgets import TINY

from marft_algos.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
BUDGET = [*TINY, "--eval-every", "1", "--no-plot", "--progress", "plain", "--threads", "1"]


def records(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.slow  # about 20 s; the in-process resume test covers the saved in-flight batch
def test_kill_9_during_an_async_run_resumes_it_exactly(tiny_path, tmp_path):
    common = ["--model", tiny_path, "--algo", "grpo", "--iterations", "4", "--max-staleness", "1"]
    common += BUDGET
    straight = tmp_path / "straight"
    main(["train", "--output-dir", str(straight), *common])
    assert [r.get("rollout/staleness_max") for r in records(straight)] == [None, 0, 1, 1, 1]

    killed = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "marft_algos.cli", "train", "--output-dir", str(killed), *common],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not (
        (killed / "metrics.jsonl").exists() and len(records(killed)) >= 3
    ):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    workers = [c for c in children(proc.pid) if "spawn" in Path(f"/proc/{c}/cmdline").read_text()]
    assert workers, "no rollout worker process found"
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    deadline = time.time() + 20
    while time.time() < deadline and any(alive(w) for w in workers):
        time.sleep(0.1)
    assert not any(alive(w) for w in workers), "the rollout worker outlived its trainer"

    result = main(["train", "--output-dir", str(killed), *common, "--resume"])
    assert result["records"][0]["iteration"] <= 3  # killed mid-run
    assert records(killed) == records(straight)
