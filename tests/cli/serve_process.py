"""``marft serve`` started as a user starts it, for the tests that run the command itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def start_serve(args: list[str], env: dict[str, str] | None = None):
    """``marft serve ARGS`` in a subprocess; returns the process and its base URL (127.0.0.1)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "marft_algos.cli", "serve", *args],
        env={
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": f"{ROOT}{os.pathsep}{EXAMPLES}",
            **(env or {}),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    assert process.stderr is not None
    for line in process.stderr:
        lines.append(line)
        found = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
        if found:
            return process, found.group(1)
    process.wait(30)
    raise AssertionError("marft serve did not start:\n" + "".join(lines))
