"""Helpers of the multi-process tests (test_distributed.py, test_fsdp.py): run a worker or a
launcher to success, share the one-process updates both compare with, and compare the adapters
the workers saved."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from filelock import FileLock


def run_ok(args: list[str], cwd: Path) -> None:
    """Run ``args`` (one thread, gloo on 127.0.0.1) and fail with its output unless it succeeds."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
    }
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def one_process_updates(tmp_path_factory, out: Path) -> None:
    """Copy into ``out`` the fixed batches and their one-process updates
    (``distributed_worker.py single``), made once per test session: the first test process of
    the session that needs them makes them, under a lock, in the session's shared temporary
    folder (pytest-xdist's workers share its parent)."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "one-process"
    with FileLock(str(shared) + ".lock"):
        if not (shared / "done").exists():
            shared.mkdir(exist_ok=True)
            worker = Path(__file__).parent / "distributed_worker.py"
            run_ok([sys.executable, str(worker), "single", str(shared)], Path(__file__).parents[3])
            (shared / "done").touch()
    shutil.copytree(shared, out, dirs_exist_ok=True)


def assert_params_close(a: dict, b: dict, atol: float) -> None:
    """The same keys, and each key's tensors equal within ``atol``."""
    assert set(a) == set(b)
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            torch.testing.assert_close(x, y, atol=atol, rtol=0, msg=key)
