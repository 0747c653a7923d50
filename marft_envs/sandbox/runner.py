"""Run untrusted Python programs against unit tests, isolated from the host.

Usable on its own::

    from marft_envs.sandbox.runner import Sandbox, UnitTests

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
  (default 1 GiB per process), file size, open files and processes/threads (``RLIMIT_NPROC``),
  through ``setrlimit`` in the process that runs the program. Where the host lets the sandbox
  create memory cgroups (cgroup v2 with the memory controller available, else cgroup v1), each run
  gets one, so the program's whole process tree shares ``memory_bytes``; without one, a namespaced
  run's tester sums the tree's resident memory every 20 ms and kills the tree past
  ``memory_bytes``, and a run with ``isolation="process"`` may hold ``processes * memory_bytes``. The default worker pool is sized from the host's free memory
  (:func:`run_memory_bound` per run).
- *No secrets.* The environment holds ``PATH``, ``LANG``, ``HOME`` and ``TMPDIR`` only; ``-I``
  ignores every ``PYTHON*`` variable and the user's site-packages, ``-S`` all site-packages.
- *Nothing of the host to see, no network, no writes, nobody else to signal* — with namespaces,
  i.e. ``unshare --net --mount --pid --ipc`` (Linux, as root or with ``CAP_SYS_ADMIN``): a network
  namespace with only a down loopback (127.0.0.1 of the host is unreachable), and a private root:
  a tmpfs that holds only the interpreter's own files (its standard library without
  ``site-packages``, its real executable — never a venv's ``bin/python`` link, and of a venv only
  the ``pyvenv.cfg`` a copied binary reads — and the shared libraries they load, bind-mounted
  read-only)
  and a fresh size-capped ``/tmp`` as the working directory, entered with ``pivot_root`` and the
  host's root detached. So no task data, no project, no ``/etc``, ``/proc``, ``/dev``, and no host
  ``/tmp``, ``/run`` or ``/var`` (no unix socket of the host). As root the program also runs under
  a random unprivileged uid with ``no_new_privs``, so it can signal no process outside its run
  and regain no privilege from a setuid binary.
- *Nothing left in the kernel, no nested namespaces* (Linux, x86_64 and aarch64, both modes): a
  seccomp filter refuses the kernel key calls (a key belongs to the uid and would outlive the
  run), a new user namespace (``unshare``/``clone`` with ``CLONE_NEWUSER``; ``clone3`` fails with
  ``ENOSYS`` and the C library falls back to ``clone``) and calls through another ABI; where no
  memory cgroup counts the run, also SysV shared memory and memfd files, whose pages no process
  maps and the fallback memory watch would not see.
- *No host path shown*: the program's process keeps only its limits (no path of the run's folder
  or cgroup in any frame), the harness is read through a file descriptor, and failure details
  name the run's folder ``<sandbox>`` and its cgroup ``<cgroup>``.
- *Grading cannot be faked.* The program runs in a child process forked *before* the tests and
  the per-run nonce are read, with stdout and stderr going to ``/dev/null`` and no handle on the
  report channel. The tests run in the parent of that child and call stand-ins for the program's
  functions; only plain values (``None``, bool, int, float, complex, str, bytes and lists, tuples,
  dicts, sets of them, exact types) come back, decoded into fresh objects, so an object with an
  ``__eq__`` that always returns True never reaches an assertion. The tests see the real builtins:
  a name the program defines that is also a builtin (``def set(*a, **k): return 0``) is not
  passed to them. The host counts a test as passed only from a report that carries the run's
  nonce and exactly one result per test; exiting early (``sys.exit(0)``, ``os._exit(0)``),
  printing fake pass lines, killing its parent or crashing the harness all leave the tests failed.
- *What comes back is bounded*: a failure's detail is one line of printable characters, at most
  :data:`DETAIL_CHARS` long.

**Fails closed.** ``Sandbox()`` (``isolation="namespaces"``, the default) raises where namespaces
are not permitted (e.g. a container without ``CAP_SYS_ADMIN``, macOS). ``isolation="process"`` is
an explicit opt-in to a weaker mode: no network namespace (the program *can* open sockets), no
private root (it can read whatever its uid may, the tests' files included, and write e.g. to
``/tmp``). As root the program still runs under a private uid, so it can signal nothing outside
its run; where that uid could not read the standard library (a Python under ``/root``) the
fallback refuses to start rather than run programs as root. As a normal user the program runs as
that user and could signal the user's other processes. Resource limits, the minimal environment,
the own session, the forked-before-the-tests runner and plain-value grading hold in both modes.
Use it only for programs you would run unsandboxed, or inside a container or VM.

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
import platform
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

from marft_envs.sandbox._harness import SYSCALL_FILTER_MACHINES
from marft_envs.sandbox.confinement import (
    MemoryCgroups,
    available_memory,
    interpreter,
    memory_cgroups,
    root_plan,
)

__all__ = [
    "DETAIL_CHARS",
    "FAILURE_KINDS",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "UnitTests",
    "available_isolation",
    "clean_detail",
    "default_sandbox",
    "namespaces_available",
    "run_memory_bound",
    "tree_memory_limit_available",
]

logger = logging.getLogger(__name__)

_HARNESS = Path(__file__).with_name("_harness.py")
_UNSHARE = ("--net", "--mount", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc")

#: The longest failure detail a result carries (one line of printable characters).
DETAIL_CHARS = 300
# Memory a run holds besides the program's: the tester process and the unshare wrapper.
_RUN_OVERHEAD_BYTES = 48 << 20

#: Why a test failed (``SandboxResult.failure``); ``None`` when every test passed.
FAILURE_KINDS = (
    "no_code",  # no program to run (the env's verdict; the sandbox never sees it)
    "syntax_error",  # the program does not compile
    "timeout",  # CPU or wall time ran out
    "memory",  # MemoryError (the address-space limit) or an oversized return value
    "wrong_answer",  # an assertion failed, or a function returned a non-plain object
    "runtime_error",  # the program raised an exception, or a signal ended its process before
    # its CPU time was up (its own os.kill(os.getpid(), 9) included)
    "exited",  # the program ended its own process (sys.exit, os._exit)
    "test_error",  # the test set-up itself failed (a dataset problem)
    "sandbox_error",  # the sandbox could not produce a trustworthy report
)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run (each enforced where the OS supports it).

    Attributes:
        cpu_seconds: CPU time of the program's process (``RLIMIT_CPU``).
        wall_seconds: Wall-clock time for the program and all its tests.
        memory_bytes: Address space of each of the program's processes (``RLIMIT_AS``), default
            1 GiB, and, where the sandbox can create a memory cgroup, the memory of the program's
            whole process tree.
        file_size_bytes: Largest file the program may write (``RLIMIT_FSIZE``).
        tmpfs_bytes: Size of the private working directory (namespaces only).
        open_files: Open file descriptors (``RLIMIT_NOFILE``).
        processes: Processes and threads of the program's uid (``RLIMIT_NPROC``). Without a
            memory cgroup the memory limit is per process, so a run holds at most
            ``processes * memory_bytes``.
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
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 < value < float("inf")  # NaN too
            ):
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
        entry_point: The function under test. The tests see the program's function of that name
            even where it is a builtin's (MBPP 126 asks for ``sum``); every other name the
            program defines that is also a builtin's is hidden from them, so they call the real
            builtin (``def set(*a, **k): return 0`` cannot make ``set(f(x)) == set(y)`` pass).
    """

    tests: tuple[str, ...]
    setup: str = ""
    entry_point: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tests, str) or not all(isinstance(t, str) for t in self.tests):
            raise TypeError(
                f"UnitTests.tests must be a sequence of code strings, got {self.tests!r:.80}."
            )
        object.__setattr__(self, "tests", tuple(self.tests))
        if self.entry_point is not None and not (
            isinstance(self.entry_point, str) and self.entry_point.isidentifier()
        ):
            raise ValueError(
                f"UnitTests.entry_point must be a Python name or None, got {self.entry_point!r}."
            )
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
    """The isolation the default ``Sandbox()`` gets here: ``"namespaces"``, or ``None`` where it
    would refuse to start (no namespaces: it fails closed; ``isolation="process"`` is an opt-in)."""
    if os.name != "posix" or not namespaces_available():
        return None
    return "namespaces"


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
        isolation: ``"namespaces"`` (the default; raises :class:`OSError` where namespaces are not
            permitted: the sandbox fails closed) or ``"process"``, an explicit opt-in to the weaker
            fallback described in :mod:`marft_envs.sandbox.runner` (no network or filesystem
            isolation). ``"auto"`` is accepted as a synonym of ``"namespaces"``; it no longer
            falls back.
        max_workers: Runs in flight at once for :meth:`submit` and :meth:`run_many` (default:
            the number of CPUs, at most 8, and no more than the host's free memory holds at
            :func:`run_memory_bound` bytes a run).
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        isolation: Literal["namespaces", "process", "auto"] = "namespaces",
        max_workers: int | None = None,
    ) -> None:
        if os.name != "posix":
            raise OSError(
                f"The code sandbox needs a POSIX system (setrlimit, fork); this is {os.name!r}."
            )
        if isolation not in ("auto", "namespaces", "process"):
            raise ValueError(f"isolation must be 'namespaces' or 'process', got {isolation!r}.")
        if isolation != "process":
            if not namespaces_available():
                raise OSError(
                    "The code sandbox needs `unshare` with permission to create network, mount and "
                    "PID namespaces (Linux, as root or with CAP_SYS_ADMIN), and it is not permitted "
                    "here, so it will not run untrusted programs. Run where it is permitted (e.g. a "
                    "container started with CAP_SYS_ADMIN), or opt in to the weaker "
                    "Sandbox(isolation='process'): no network or filesystem isolation, so only for "
                    "programs you would run unsandboxed (see docs/code_envs.md)."
                )
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
        self.max_workers = max_workers or _default_workers(self.limits, isolation)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        if isolation == "namespaces":
            _check_private_root()
        _warn_without_syscall_filter()

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
            kinds = ["sandbox_error"] * len(tests.tests)
            details = [clean_detail(str(err))] * len(tests.tests)
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
    def _command(self, harness_fd: int) -> list[str]:
        # The harness is read through an inherited descriptor: a path of the host would show in
        # the run's ``sys.argv`` and code objects, where the program can read it.
        python = [interpreter(), "-I", "-S", f"/proc/self/fd/{harness_fd}"]
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
        os.chmod(base, 0o711)
        uid = self._private_uid()
        header: dict[str, object] = {"isolation": self.isolation, "uid": uid}
        if self.isolation == "namespaces":
            # The harness builds the run's root on this mount point: the interpreter's files only.
            workdir = os.path.join(base, "root")
            os.mkdir(workdir, 0o700)
            header.update(root=workdir, root_plan=root_plan())
            env = _minimal_env("/tmp")
        else:
            workdir = os.path.join(base, "work")
            os.mkdir(workdir, 0o700)
            if uid is not None:
                os.chown(workdir, uid, uid)
            env = _minimal_env(workdir)
        cgroups = memory_cgroups()
        cgroup = None
        if cgroups is not None:
            try:
                cgroup = cgroups.create(limits.memory_bytes)
            except OSError as err:
                shutil.rmtree(base, ignore_errors=True)
                raise _Untrusted(
                    _neutral(
                        f"could not create the run's memory cgroup: {err}", base, cgroups.parent
                    )
                ) from err
            header["cgroup"] = {"path": cgroup, "events": cgroups.events}
        else:
            # No cgroup counts pages that belong to no process: the run may not make any.
            header["deny_shared_memory"] = True
            if self.isolation == "namespaces":
                header["account_bytes"] = limits.memory_bytes
        encoded = program.encode("utf-8", "surrogatepass")
        header.update(
            program_bytes=len(encoded),
            workdir=workdir,
            cpu_seconds=int(limits.cpu_seconds),
            wall_seconds=float(limits.wall_seconds),
            memory_bytes=int(limits.memory_bytes),
            file_size_bytes=int(limits.file_size_bytes),
            tmpfs_bytes=int(limits.tmpfs_bytes),
            open_files=int(limits.open_files),
            processes=int(limits.processes),
            message_bytes=int(limits.message_bytes),
        )
        rest = {
            "setup": tests.setup,
            "tests": list(tests.tests),
            "entry_point": tests.entry_point,
            "nonce": nonce,
        }
        payload = json.dumps(header).encode() + b"\n" + encoded + json.dumps(rest).encode()
        try:
            harness = os.open(_HARNESS, os.O_RDONLY | os.O_CLOEXEC)
            try:
                proc = subprocess.Popen(
                    self._command(harness),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=workdir,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(harness,),
                )
            finally:
                os.close(harness)
        except OSError as err:
            _clean_up(base, cgroup)
            raise _Untrusted(_neutral(f"could not start the sandbox: {err}", base, cgroup)) from err
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
            _clean_up(base, cgroup)
        try:
            return _parse_report(out, err_text, nonce, len(tests.tests))
        except _Untrusted as err:  # the harness's own errors may name the run's folders
            raise _Untrusted(_neutral(str(err), base, cgroup)) from None


@functools.lru_cache(maxsize=1)
def _check_private_root() -> None:
    """Run one program once per process: unshare may be permitted where the mounts of the
    private root are not (some container profiles), and then every run would fail."""
    probe = Sandbox.__new__(Sandbox)
    probe.limits, probe.isolation = SandboxLimits(), "namespaces"
    result = probe.run("x = 1", UnitTests(("assert x == 1",)))
    if not result.all_passed:  # not cached: the next Sandbox() checks again
        raise OSError(
            "The code sandbox could not run a program in its private root here "
            f"({result.failure}: {result.detail}). It needs to mount a tmpfs, bind-mount the "
            "Python installation read-only and pivot_root inside its mount namespace; opt in to "
            "the weaker Sandbox(isolation='process') only for programs you would run unsandboxed."
        )


@functools.lru_cache(maxsize=1)
def _warn_without_syscall_filter() -> None:
    """The syscall filter (see ``_harness``) knows x86_64 and aarch64 Linux; elsewhere say so."""
    machine = platform.machine()
    if sys.platform.startswith("linux") and machine not in SYSCALL_FILTER_MACHINES:
        logger.warning(
            "The code sandbox has no syscall filter for %s: programs can register kernel keys "
            "that outlive their run and create user namespaces. Filtered machines: %s.",
            machine,
            ", ".join(SYSCALL_FILTER_MACHINES),
        )


def _clean_up(base: str, cgroup: str | None) -> None:
    shutil.rmtree(base, ignore_errors=True)
    if cgroup is not None:
        MemoryCgroups.remove(cgroup)


def run_memory_bound(limits: SandboxLimits, isolation: str = "namespaces") -> int:
    """The most memory one run may hold: ``memory_bytes`` for the program's whole process tree
    (a memory cgroup, or the per-tree accounting of a namespaced run) plus its tmpfs, else
    ``processes * memory_bytes`` plus its tmpfs (``isolation="process"`` without cgroups)."""
    if tree_memory_limit_available(isolation):
        program = limits.memory_bytes
    else:
        program = limits.processes * limits.memory_bytes
    return program + limits.tmpfs_bytes + _RUN_OVERHEAD_BYTES


def tree_memory_limit_available(isolation: str = "namespaces") -> bool:
    """Whether runs get one memory limit for the program's whole process tree: a memory cgroup
    where one can be created, else (namespaces only) the tester's accounting of the tree's
    resident memory every 20 ms, which kills the tree once it passes the limit."""
    return memory_cgroups() is not None or isolation == "namespaces"


def _available_memory() -> int | None:
    return available_memory()


def _default_workers(limits: SandboxLimits, isolation: str) -> int:
    workers = min(8, os.cpu_count() or 1)
    free = _available_memory()
    if free is not None:
        workers = min(workers, free // run_memory_bound(limits, isolation))
    return max(1, workers)


def _neutral(text: str, base: str, cgroup: str | None = None) -> str:
    """``text`` with the run's host paths replaced by neutral names: its folder under the host's
    temporary folder by ``<sandbox>``, its cgroup by ``<cgroup>``, the harness by ``<harness>``."""
    for path, name in ((cgroup, "<cgroup>"), (base, "<sandbox>"), (str(_HARNESS), "<harness>")):
        if path:
            text = text.replace(path, name)
    return text


def clean_detail(text: str) -> str:
    """A failure message as it may be shown: one line of printable characters (others, line
    breaks included, become spaces), at most :data:`DETAIL_CHARS` long. The program controls
    most of it, and the retry teams read it."""
    text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 3] + "..."


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
            details.append(clean_detail(str(r.get("detail", ""))))
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
