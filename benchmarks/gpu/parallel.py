"""Many jobs at once, each in its own process group under a wall-clock limit, all under a deadline.

:func:`launch` starts ``Job`` commands (at most ``max_parallel`` at a time), cuts each at its
limit and the rest at the deadline, and on every exit path (an exception, Ctrl-C, SIGTERM turned
into ``SystemExit``) kills every group still running; each child also dies with the launcher
(``PR_SET_PDEATHSIG``), so a launcher killed by SIGKILL leaves no job behind on a GPU. A job's
record: ``status`` (``finished``, ``failed``, ``timed out``, ``killed``, ``not started``), wall
``seconds``, the ``reason`` when it did not finish (and its stderr's tail when it ran), and from
its result JSON ``peak_memory_gb`` and ``device``. Used by ``program_team/gpu_v2.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Least time worth starting a job with (imports and loading a model).
MIN_START_S = 30.0
POLL_S = 0.2
TAIL_CHARS = 2000
Records = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Job:
    """One job: its name, command, and ``stem``: it writes ``<out>/<stem>.json`` when it finishes,
    and its stdout and stderr go to ``<out>/logs/<stem>.out`` and ``.err``."""

    name: str
    command: list[str]
    stem: str


#: libc, loaded before any fork (dlopen in a forked child of a threaded parent can deadlock).
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the launcher dies (even by SIGKILL)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own group: the job and its children
    proc.wait()


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-TAIL_CHARS:] if path.is_file() else ""


def _ended(job: Job, out: Path, rc: int, seconds: float) -> dict[str, Any]:
    """The record of a job that exited by itself with ``rc``."""
    result, seconds = out / f"{job.stem}.json", round(seconds, 1)
    if rc == 0 and result.is_file():
        row = json.loads(result.read_text())
        gpu = row.get("run_info", {}).get("machine", {}).get("gpu")
        return {
            "status": "finished",
            "seconds": seconds,
            "peak_memory_gb": row.get("peak_memory_gb"),
            "device": gpu or row.get("device"),
            "json": result.name,
        }
    why = f"exit code {rc}" if rc else f"exit code 0 without {result.name}"
    tail = _tail(out / "logs" / f"{job.stem}.err")
    return {"status": "failed", "seconds": seconds, "reason": f"failed: {why}", "stderr_tail": tail}


def launch(
    jobs: list[Job],
    out: Path,
    env: dict[str, str],
    max_parallel: int,
    limit_s: float,
    deadline_s: float,
    report: Callable[[Records], None] | None = None,
    cwd: Path | None = None,
) -> Records:
    """Run ``jobs``, at most ``max_parallel`` at a time, each under ``limit_s`` and all under
    ``deadline_s``; ``report(records)`` after each change. Kills every child on every exit."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    records: Records = {j.name: {"status": "not started"} for j in jobs}
    pending = list(jobs)
    running: dict[str, tuple[Job, subprocess.Popen[bytes], float, float]] = {}
    end = time.monotonic() + deadline_s
    why_stopped = f"the deadline of {deadline_s:.0f} s left under {MIN_START_S:.0f} s to start it"
    try:
        while pending or running:
            now = time.monotonic()
            started = bool(pending) and len(running) < max_parallel and end - now >= MIN_START_S
            while pending and len(running) < max_parallel and end - now >= MIN_START_S:
                job = pending.pop(0)
                with (
                    open(out / "logs" / f"{job.stem}.out", "wb") as so,
                    open(out / "logs" / f"{job.stem}.err", "wb") as se,
                ):
                    proc = subprocess.Popen(
                        job.command,
                        stdout=so,
                        stderr=se,
                        env=env,
                        cwd=cwd,
                        start_new_session=True,
                        preexec_fn=_die_with_parent,
                    )
                running[job.name] = (job, proc, now, min(limit_s, end - now))
                records[job.name] = {"status": "running", "pid": proc.pid}
            if started and report:
                report(records)  # the jobs just started, with their pids
            for name, (job, proc, start, limit) in list(running.items()):
                rc, seconds = proc.poll(), time.monotonic() - start
                if rc is None and seconds < limit:
                    continue
                del running[name]
                if rc is None:
                    _kill(proc)
                    cut = "its limit" if limit == limit_s else "the launcher's deadline"
                    records[name] = {
                        "status": "timed out",
                        "seconds": round(seconds, 1),
                        "reason": f"timed out: cut at {cut} ({limit:.0f} s)",
                        "stderr_tail": _tail(out / "logs" / f"{job.stem}.err"),
                    }
                else:
                    records[name] = _ended(job, out, rc, seconds)
                if report:
                    report(records)
            if pending and not running and end - time.monotonic() < MIN_START_S:
                break
            time.sleep(POLL_S)
    except BaseException as err:  # Ctrl-C, SIGTERM (SystemExit), a bug: say why, then re-raise
        why_stopped = f"the launcher stopped ({type(err).__name__}: {err})"
        raise
    finally:
        for name, (job, proc, start, _) in running.items():
            _kill(proc)
            records[name] = {
                "status": "killed",
                "seconds": round(time.monotonic() - start, 1),
                "reason": f"killed: {why_stopped}",
                "stderr_tail": _tail(out / "logs" / f"{job.stem}.err"),
            }
        for job in pending:
            records[job.name] = {"status": "not started", "reason": f"not started: {why_stopped}"}
        if report:
            report(records)
    return records
