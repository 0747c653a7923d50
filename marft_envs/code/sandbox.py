"""Run untrusted Python programs against unit tests, isolated from the host.

Usable on its own::

    from marft_envs.code.sandbox import Sandbox, UnitTests

    sandbox = Sandbox()
    result = sandbox.run("def add(a, b):\\n    return a + b", UnitTests(tests=("assert add(1, 2) == 3",)))
    result.passed, result.total, result.failure      # (1, 1, None)

Threat model
------------
The **program** is hostile: it may loop forever, allocate without bound, fork, write files, open
sockets, read the environment, signal other processes, exit early, print fake results, or return
objects that claim to equal anything. The **tests**, the **dataset** and the **host** are trusted.
What the sandbox guarantees, and how:

- *Nothing outlives a run.* Each run is a fresh ``python -I -S`` process tree in its own session;
  the whole process group is killed at the end. With namespaces (below) the tree is also a PID
  namespace, so when it ends the kernel kills every process in it, even ones that called
  ``setsid()``; without them, when the sandbox runs as root, every process of the run's private
  uid is killed.
- *Resources are bounded*: CPU time, wall time (the parent kills the tree), address space
  (default 1 GiB), file size, open files and processes/threads (``RLIMIT_NPROC``), through
  ``setrlimit`` in the process that runs the program.
- *No secrets.* The environment holds ``PATH``, ``LANG``, ``HOME`` and ``TMPDIR`` only; ``-I``
  ignores every ``PYTHON*`` variable and the user's site-packages, ``-S`` all site-packages.
- *No network, no writes outside the sandbox, nobody else to signal* — with namespaces, i.e.
  ``unshare --net --mount --pid --ipc --mount-proc`` (Linux, as root or with ``CAP_SYS_ADMIN``):
  a network namespace with only a down loopback (127.0.0.1 of the host is unreachable), every
  mount remounted read-only and ``nosuid`` with a fresh size-capped tmpfs as the working directory,
  a private ``/proc`` (host processes are invisible). As root the program also runs under a random
  unprivileged uid with ``no_new_privs``, so it can signal no process outside its run and regain
  no privilege from a setuid binary.
- *Grading cannot be faked.* The program runs in a child process forked *before* the tests and
  the per-run nonce are read, with stdout and stderr going to ``/dev/null`` and no handle on the
  report channel. The tests run in the parent of that child and call stand-ins for the program's
  functions; only plain values (``None``, bool, int, float, complex, str, bytes and lists, tuples,
  dicts, sets of them, exact types) come back, decoded into fresh objects, so an object with an
  ``__eq__`` that always returns True never reaches an assertion. The host counts a test as passed
  only from a report that carries the run's nonce and exactly one result per test; exiting early
  (``sys.exit(0)``, ``os._exit(0)``), printing fake pass lines, killing its parent or crashing
  the harness all leave the tests failed.

**Fallback** (``isolation="process"``; chosen by ``"auto"`` where ``unshare`` is not permitted,
e.g. a container without ``CAP_SYS_ADMIN``, macOS): no network namespace (the program *can* open
sockets) and no read-only view (it can write wherever its uid may, e.g. ``/tmp``). As root the
program still runs under a private uid, so it can signal nothing outside its run; where that uid
could not read the standard library (a Python under ``/root``) the fallback refuses to start
rather than run programs as root. As a normal user the program runs as that user and could
signal the user's other processes. Resource limits, the minimal environment, the own session,
the forked-before-the-tests runner and plain-value grading hold in both modes. Run untrusted
code only with ``isolation="namespaces"`` (which fails loudly when unavailable) or inside a
container or VM.

Not covered: a program that attacks the kernel, and side channels (timing). Test code runs in the
sandbox too but is trusted data, like the dataset it comes from.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "FAILURE_KINDS",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "UnitTests",
    "available_isolation",
    "default_sandbox",
    "namespaces_available",
]

logger = logging.getLogger(__name__)

_HARNESS = Path(__file__).with_name("_harness.py")
_UNSHARE = ("--net", "--mount", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc")

#: Why a test failed (``SandboxResult.failure``); ``None`` when every test passed.
FAILURE_KINDS = (
    "no_code",  # no program to run (the env's verdict; the sandbox never sees it)
    "syntax_error",  # the program does not compile
    "timeout",  # CPU or wall time ran out
    "memory",  # MemoryError (the address-space limit) or an oversized return value
    "wrong_answer",  # an assertion failed, or a function returned a non-plain object
    "runtime_error",  # the program raised an exception
    "exited",  # the program ended its own process (sys.exit, os._exit, a signal to itself)
    "test_error",  # the test set-up itself failed (a dataset problem)
    "sandbox_error",  # the sandbox could not produce a trustworthy report
)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run (each enforced where the OS supports it).

    Attributes:
        cpu_seconds: CPU time of the program's process (``RLIMIT_CPU``).
        wall_seconds: Wall-clock time for the program and all its tests.
        memory_bytes: Address space of the program's process (``RLIMIT_AS``), default 1 GiB.
        file_size_bytes: Largest file the program may write (``RLIMIT_FSIZE``).
        tmpfs_bytes: Size of the private working directory (namespaces only).
        open_files: Open file descriptors (``RLIMIT_NOFILE``).
        processes: Processes and threads of the program's uid (``RLIMIT_NPROC``). The memory
            limit is per process, so a run holds at most ``processes * memory_bytes``.
        message_bytes: Largest return value, JSON-encoded.
    """

    cpu_seconds: int = 10
    wall_seconds: float = 15.0
    memory_bytes: int = 1 << 30
    file_size_bytes: int = 16 << 20
    tmpfs_bytes: int = 64 << 20
    open_files: int = 64
    processes: int = 4
    message_bytes: int = 16 << 20

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}.")
        if self.memory_bytes < 64 << 20:
            raise ValueError(
                f"SandboxLimits.memory_bytes={self.memory_bytes} is below the 64 MiB a Python "
                "interpreter needs to start; use at least 64 << 20."
            )


@dataclass(frozen=True)
class UnitTests:
    """The tests a program is graded on.

    Attributes:
        tests: Python snippets, each one test (usually one ``assert``); they run in order in one
            namespace that holds the program's names.
        setup: Code run once before the tests in that namespace (imports, helpers).
    """

    tests: tuple[str, ...]
    setup: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.tests, str) or not all(isinstance(t, str) for t in self.tests):
            raise TypeError(
                f"UnitTests.tests must be a sequence of code strings, got {self.tests!r:.80}."
            )
        object.__setattr__(self, "tests", tuple(self.tests))
        if not self.tests:
            raise ValueError(
                "UnitTests needs at least one test; a program with no tests proves nothing."
            )


@dataclass(frozen=True)
class SandboxResult:
    """The verdict on one program.

    Attributes:
        outcomes: Whether each test passed, in order.
        failure: Why the first failing test failed (one of :data:`FAILURE_KINDS`), or ``None``.
        detail: A short message about that failure (exception type and text).
        seconds: Wall time of the run, start-up included.
        isolation: ``"namespaces"`` or ``"process"``.
    """

    outcomes: tuple[bool, ...]
    failure: str | None
    detail: str = ""
    seconds: float = 0.0
    isolation: str = "process"
    kinds: tuple[str | None, ...] = field(default=(), repr=False)

    @property
    def passed(self) -> int:
        """Number of tests passed."""
        return sum(self.outcomes)

    @property
    def total(self) -> int:
        """Number of tests."""
        return len(self.outcomes)

    @property
    def all_passed(self) -> bool:
        """Every test passed."""
        return self.total > 0 and all(self.outcomes)


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether ``unshare`` may create the namespaces the sandbox uses (probed once per process)."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return False
    try:
        done = subprocess.run(
            [unshare, *_UNSHARE, "true"], capture_output=True, timeout=10, env=_minimal_env("/")
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def available_isolation() -> str | None:
    """The isolation ``Sandbox(isolation="auto")`` gets here: ``"namespaces"``, ``"process"``, or
    ``None`` where no sandbox can run (not POSIX, or root whose standard library another uid
    cannot read, without namespaces)."""
    if os.name != "posix":
        return None
    if namespaces_available():
        return "namespaces"
    if os.geteuid() == 0 and not _stdlib_world_readable():
        return None
    return "process"


@functools.lru_cache(maxsize=1)
def _stdlib_world_readable() -> bool:
    """Whether another uid can read the standard library (not so under a private ``/root``)."""
    path = Path(os.__file__).resolve().parent
    return all(p.stat().st_mode & 0o001 for p in (path, *path.parents)) and bool(
        path.stat().st_mode & 0o004
    )


def _minimal_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home, "TMPDIR": home}


class Sandbox:
    """Runs programs against tests in isolated processes, a bounded number at a time.

    Args:
        limits: Resource limits of each run.
        isolation: ``"namespaces"`` (fail when not permitted), ``"process"`` (the documented
            fallback) or ``"auto"`` (namespaces where permitted, else the fallback, with a warning).
        max_workers: Runs in flight at once for :meth:`submit` and :meth:`run_many`
            (default: the number of CPUs, at most 8).
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        isolation: Literal["auto", "namespaces", "process"] = "auto",
        max_workers: int | None = None,
    ) -> None:
        if os.name != "posix":
            raise OSError(
                f"The code sandbox needs a POSIX system (setrlimit, fork); this is {os.name!r}."
            )
        if isolation not in ("auto", "namespaces", "process"):
            raise ValueError(
                f"isolation must be 'auto', 'namespaces' or 'process', got {isolation!r}."
            )
        if isolation != "process" and not namespaces_available():
            if isolation == "namespaces":
                raise OSError(
                    "isolation='namespaces' needs `unshare` with permission to create network, mount "
                    "and PID namespaces (Linux, root or CAP_SYS_ADMIN); use isolation='process' for "
                    "the weaker fallback described in marft_envs.code.sandbox."
                )
            logger.warning(
                "Namespaces are not permitted here; the code sandbox falls back to isolation='process' "
                "(no network or filesystem isolation; see the marft_envs.code.sandbox docstring)."
            )
            isolation = "process"
        elif isolation == "auto":
            isolation = "namespaces"
        if isolation == "process" and os.geteuid() == 0 and not _stdlib_world_readable():
            raise OSError(
                f"The fallback sandbox (isolation='process') cannot run programs as root safely, and "
                f"another uid cannot read the standard library under {Path(os.__file__).parent} here. "
                "Use isolation='namespaces' (needs unshare), run as a normal user, or use a Python "
                "installed where every user can read it."
            )
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}.")
        self.limits = limits or SandboxLimits()
        self.isolation: str = isolation
        self.max_workers = max_workers or min(8, os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Sandbox(isolation={self.isolation!r}, max_workers={self.max_workers}, limits={self.limits})"

    # ------------------------------------------------------------------ public API
    def run(self, program: str, tests: UnitTests) -> SandboxResult:
        """Run ``program`` and then ``tests`` in a fresh sandbox; blocks until done."""
        if not isinstance(program, str):
            raise TypeError(f"program must be Python source text, got {type(program).__name__}.")
        if not isinstance(tests, UnitTests):
            raise TypeError(f"tests must be a UnitTests, got {type(tests).__name__}.")
        start = time.perf_counter()
        try:
            kinds, details = self._execute(program, tests)
        except _Untrusted as err:
            kinds, details = ["sandbox_error"] * len(tests.tests), [str(err)] * len(tests.tests)
        outcomes = tuple(kind is None for kind in kinds)
        first = next((i for i, kind in enumerate(kinds) if kind is not None), None)
        return SandboxResult(
            outcomes=outcomes,
            failure=None if first is None else kinds[first],
            detail="" if first is None else details[first],
            seconds=time.perf_counter() - start,
            isolation=self.isolation,
            kinds=tuple(kinds),
        )

    def submit(self, program: str, tests: UnitTests) -> Future[SandboxResult]:
        """Start a run on the worker pool; the future's result is :meth:`run`'s."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.max_workers, thread_name_prefix="marft-sandbox"
                )
            return self._pool.submit(self.run, program, tests)

    def run_many(self, jobs: Iterable[tuple[str, UnitTests]]) -> list[SandboxResult]:
        """Run many ``(program, tests)`` pairs, ``max_workers`` at a time; results in order."""
        futures = [self.submit(program, tests) for program, tests in jobs]
        return [f.result() for f in futures]

    def close(self) -> None:
        """Wait for runs in flight and stop the worker pool (a later submit starts a new one)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # ------------------------------------------------------------------ internals
    def _command(self) -> list[str]:
        python = [sys.executable, "-I", "-S", str(_HARNESS)]
        if self.isolation == "namespaces":
            return [shutil.which("unshare") or "unshare", *_UNSHARE, *python]
        return python

    def _private_uid(self) -> int | None:
        """A fresh unprivileged uid for one run (as root), so NPROC counts this run only and the
        program owns nothing and may signal nothing outside it; ``None`` when not root."""
        if os.geteuid() != 0:
            return None
        return 100_000 + secrets.randbelow(1 << 30)

    def _execute(self, program: str, tests: UnitTests) -> tuple[list[str | None], list[str]]:
        limits = self.limits
        nonce = secrets.token_hex(16)
        base = tempfile.mkdtemp(prefix="marft-sandbox-")
        workdir, libdir = os.path.join(base, "work"), os.path.join(base, "lib")
        os.mkdir(workdir, 0o700)
        os.mkdir(libdir, 0o755)
        os.chmod(base, 0o711)
        uid = self._private_uid()
        if uid is not None and self.isolation == "process":
            os.chown(workdir, uid, uid)
        encoded = program.encode("utf-8", "surrogatepass")
        header = {
            "program_bytes": len(encoded),
            "isolation": self.isolation,
            "workdir": workdir,
            "libdir": libdir,
            "uid": uid,
            "cpu_seconds": int(limits.cpu_seconds),
            "wall_seconds": float(limits.wall_seconds),
            "memory_bytes": int(limits.memory_bytes),
            "file_size_bytes": int(limits.file_size_bytes),
            "tmpfs_bytes": int(limits.tmpfs_bytes),
            "open_files": int(limits.open_files),
            "processes": int(limits.processes),
            "message_bytes": int(limits.message_bytes),
        }
        rest = {"setup": tests.setup, "tests": list(tests.tests), "nonce": nonce}
        payload = json.dumps(header).encode() + b"\n" + encoded + json.dumps(rest).encode()
        try:
            proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=_minimal_env(workdir),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as err:
            shutil.rmtree(base, ignore_errors=True)
            raise _Untrusted(f"could not start the sandbox: {err}") from err
        try:
            # The harness enforces wall_seconds itself; the extra time covers start-up and report.
            out, err_text = proc.communicate(payload, timeout=limits.wall_seconds + 10.0)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return ["timeout"] * len(tests.tests), ["the sandbox ran past its wall time"] * len(
                tests.tests
            )
        finally:
            _kill_group(proc)
            shutil.rmtree(base, ignore_errors=True)
        return _parse_report(out, err_text, nonce, len(tests.tests))


class _Untrusted(Exception):
    """No trustworthy report came back from a run."""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.error("Sandbox process %d did not die after SIGKILL.", proc.pid)


def _parse_report(
    out: bytes, err: bytes, nonce: str, n_tests: int
) -> tuple[list[str | None], list[str]]:
    """Per-test verdicts from the harness's report; anything unexpected is a sandbox error."""
    lines = out.splitlines()
    if len(lines) != 1:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise _Untrusted(
            f"expected one report line, got {len(lines)}; harness said: {' | '.join(tail)[:500]}"
        )
    try:
        report = json.loads(lines[0])
        if report["nonce"] != nonce:
            raise _Untrusted("the report does not carry this run's nonce")
        results = report["results"]
        if not isinstance(results, list) or len(results) != n_tests:
            raise _Untrusted(f"the report has {len(results)} results for {n_tests} tests")
        kinds: list[str | None] = []
        details: list[str] = []
        for r in results:
            if r["passed"] is True and r["kind"] is None:
                kinds.append(None)
            else:
                kinds.append(r["kind"] if r["kind"] in FAILURE_KINDS else "sandbox_error")
            details.append(str(r.get("detail", ""))[:300])
    except (ValueError, KeyError, TypeError) as error:
        raise _Untrusted(f"malformed report: {error}") from None
    return kinds, details


_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide sandbox the code envs share (one worker pool for all env copies)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Sandbox()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def run_tests(
    program: str, tests: Sequence[str], setup: str = "", **kwargs: object
) -> SandboxResult:
    """Shortcut: run ``program`` against ``tests`` in the default sandbox (kwargs: a new one's)."""
    sandbox = Sandbox(**kwargs) if kwargs else default_sandbox()  # type: ignore[arg-type]
    return sandbox.run(program, UnitTests(tuple(tests), setup))
