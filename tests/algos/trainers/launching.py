"""Helpers of the multi-process tests (test_distributed.py, test_fsdp.py): run a worker or a
launcher to success, and compare the adapters the workers saved."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch


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


def assert_params_close(a: dict, b: dict, atol: float) -> None:
    """The same keys, and each key's tensors equal within ``atol``."""
    assert set(a) == set(b)
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            torch.testing.assert_close(x, y, atol=atol, rtol=0, msg=key)
