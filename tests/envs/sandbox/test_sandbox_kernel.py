"""What a run may ask of the kernel beyond its own processes: kernel keys, user namespaces, shared
memory the fallback memory watch cannot count; and what a run learns of the host: the cause of
its end, and no host path (its folder, its cgroup, the harness) in what it can read or is told.
"""

from __future__ import annotations

import platform
import tempfile
from pathlib import Path

import pytest

from marft_envs.sandbox import _harness
from marft_envs.sandbox import runner as sandbox_module
from marft_envs.sandbox._harness import _SYSCALLS, SYSCALL_FILTER_MACHINES
from marft_envs.sandbox.confinement import MemoryCgroups
from marft_envs.sandbox.runner import Sandbox, SandboxLimits, UnitTests
from marft_envs.tools.calls import run_expression

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=8.0, memory_bytes=256 << 20)
REPO = Path(__file__).resolve().parents[3]

filtered = pytest.mark.skipif(
    platform.machine() not in SYSCALL_FILTER_MACHINES,
    reason=f"no syscall filter for {platform.machine()}",
)


def _numbers() -> dict[str, int]:
    return _SYSCALLS[platform.machine()][1]


def _key_users() -> dict[int, int]:
    """Keys per uid, from ``/proc/key-users`` (``uid: usage nkeys/nikeys ...``)."""
    keys = {}
    for line in Path("/proc/key-users").read_text().splitlines():
        uid, _, rest = line.partition(":")
        keys[int(uid)] = int(rest.split()[1].split("/")[0])
    return keys


# --- kernel keys ----------------------------------------------------------------------------------

ADD_KEYS = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
KEYRINGS = (-2, -3, -4, -5)  # process, session, user and user-session keyrings
def keys_added():
    added = 0
    for i in range(200):
        payload = b"x" * 64
        if libc.syscall(ADD_KEY, b"user", b"k%d" % i, payload, 64, KEYRINGS[i % 4]) > 0:
            added += 1
    # A session keyring of its own, then a key in it, then one by request_key.
    if libc.syscall(KEYCTL, 1, b"mine") > 0:  # KEYCTL_JOIN_SESSION_KEYRING
        added += 1
    if libc.syscall(REQUEST_KEY, b"user", b"k0", None, -4) > 0:
        added += 1
    return added
"""


@filtered
def test_a_run_leaves_no_kernel_key(sandbox, run_uids):
    numbers = _numbers()
    program = (
        ADD_KEYS.replace("ADD_KEY", str(numbers["add_key"]))
        .replace("KEYCTL", str(numbers["keyctl"]))
        .replace("REQUEST_KEY", str(numbers["request_key"]))
    )
    result = sandbox.run(program, UnitTests(("assert keys_added() == 0",)))
    assert result.all_passed, result
    if Path("/proc/key-users").exists():
        # Keys belong to the uid, not to the run's processes: none may be registered at all.
        left = {uid: n for uid, n in _key_users().items() if uid in run_uids}
        assert all(n == 0 for n in left.values()), left


# --- user namespaces ------------------------------------------------------------------------------

NAMESPACES = """
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
def by_unshare():
    return libc.unshare(CLONE_NEWUSER), ctypes.get_errno()
def by_clone():
    pid = libc.syscall(CLONE, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    err = ctypes.get_errno()
    if pid > 0:
        os.waitpid(pid, 0)
    return pid, err
def threads_and_processes_still_start():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(1))
    thread.start()
    thread.join()
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    return seen == [1] and os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
"""


@filtered
def test_a_run_cannot_create_a_user_namespace(sandbox):
    program = NAMESPACES.replace("CLONE,", f"{_numbers()['clone']},")
    result = sandbox.run(
        program,
        UnitTests(
            (
                "assert by_unshare() == (-1, 1)",  # EPERM
                "assert by_clone() == (-1, 1)",
                "assert threads_and_processes_still_start()",
            )
        ),
    )
    assert result.all_passed, result


# --- shared memory where no cgroup counts it ------------------------------------------------------

# Pieces below the per-process limits (address space, file size), 200 MiB in all, held in pages
# that no process maps once the piece is written.
HOLD_SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def f(x):
    size = 8 << 20
    for _ in range(25):
        shmid = libc.shmget(0, size, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        if shmid < 0:
            return None
        address = libc.shmat(shmid, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            return None
        ctypes.memset(address, 1, size)
        libc.shmdt(ctypes.c_void_p(address))  # detached: the segment stays, in no process
    return x
"""

HOLD_MEMFD = """
import os
def f(x):
    files = []
    for _ in range(25):
        try:
            fd = os.memfd_create("hold")
        except OSError:
            return None
        for _ in range(8):
            os.write(fd, b"x" * (1 << 20))
        files.append(fd)
    return x
"""


@filtered
@pytest.mark.parametrize("program", [HOLD_SHM, HOLD_MEMFD], ids=["sysv-shm", "memfd"])
def test_without_a_cgroup_memory_outside_the_processes_cannot_be_held(monkeypatch, program):
    # The fallback memory watch sums the processes' resident memory: 200 MiB of pages that no
    # process maps would pass a 128 MiB limit unseen, so such pages cannot be made there.
    monkeypatch.setattr(sandbox_module, "memory_cgroups", lambda: None)
    limits = SandboxLimits(cpu_seconds=4, wall_seconds=10.0, memory_bytes=128 << 20)
    box = Sandbox(limits, isolation="namespaces", max_workers=1)
    try:
        result = box.run(program, UnitTests(("assert f(7) == 7",)))
    finally:
        box.close()
    assert result.passed == 0, result


@filtered
def test_with_a_cgroup_shared_memory_is_counted_and_allowed(sandbox):
    if sandbox_module.memory_cgroups() is None:
        pytest.skip("no memory cgroup can be created here")
    small = HOLD_MEMFD.replace("range(25)", "range(1)")
    assert sandbox.run(small, UnitTests(("assert f(7) == 7",))).all_passed


# --- why a run ended ------------------------------------------------------------------------------

SELF_KILLS = {
    "kill(getpid(), 9)": "import os\ndef f(x):\n    os.kill(os.getpid(), 9)\n",
    "killpg(0, 9)": "import os\ndef f(x):\n    os.killpg(0, 9)\n",
    "a child's kill(-1, 9)": (
        "import os, time\n"
        "def f(x):\n"
        "    if os.fork() == 0:\n"
        "        os.kill(-1, 9)\n"
        "        os._exit(0)\n"
        "    time.sleep(5)\n"
    ),
    "kill(getpid(), SIGXCPU)": "import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGXCPU)\n",
}


@pytest.mark.parametrize("name", list(SELF_KILLS))
def test_a_program_that_kills_itself_is_not_told_it_used_up_its_cpu_time(sandbox, name):
    result = sandbox.run(SELF_KILLS[name], UnitTests(("assert f(1) == 1",)))
    assert result.failure == "runtime_error", result
    assert "killed by signal" in result.detail and "CPU time" not in result.detail, result


def test_a_program_that_uses_up_its_cpu_time_is_told_so(sandbox):
    result = sandbox.run("def f(x):\n    while True:\n        pass\n", UnitTests(("f(1)",)))
    assert result.failure == "timeout" and "CPU time (2 s)" in result.detail, result


# --- no host path ---------------------------------------------------------------------------------

LOOK_AROUND = """
import sys
def seen():
    text = [repr(sys.argv), repr(getattr(sys, "orig_argv", ""))]
    frame = sys._getframe()
    while frame is not None:
        text.append(frame.f_code.co_filename)
        text.append(repr({k: v for k, v in frame.f_locals.items() if k != "text"}))
        frame = frame.f_back
    main = sys.modules.get("__main__")
    text.append(repr(getattr(main, "__file__", "")))
    return " ".join(text)
"""


def _host_paths() -> list[str]:
    paths = [
        str(Path(tempfile.gettempdir()) / "marft-sandbox-"),
        str(sandbox_module._HARNESS),
        str(REPO),
    ]
    cgroups = sandbox_module.memory_cgroups()
    if cgroups is not None:
        paths.append(cgroups.parent)
    return paths


def test_the_program_finds_no_host_path_in_its_process(sandbox):
    # Every frame of the runner, its arguments and its main module: no path of the host's.
    probe = UnitTests((f"leaks = [p for p in {_host_paths()!r} if p in seen()]\nassert not leaks",))
    result = sandbox.run(LOOK_AROUND, probe)
    assert result.all_passed, result
    # The same through the tool's output: what the runner's frames hold.
    # (Written backwards: the expression's own text is in the runner's frames.)
    backwards = [p[::-1] for p in _host_paths()]
    expression = (
        f"(lambda sys: [p[::-1] for p in {backwards!r} if p[::-1] in "
        "repr([(f.f_code.co_filename, f.f_locals) for f in (sys._getframe(i) for i in range(4))])"
        "])(__import__('sys'))"
    )
    assert run_expression(expression).output == "[]"


def test_failure_details_name_no_host_path(monkeypatch):
    box = Sandbox(LIMITS, isolation="namespaces", max_workers=1)
    base = str(Path(tempfile.gettempdir()) / "marft-sandbox-")
    # A root that cannot be built: the harness's error names the mount point under the run's
    # folder.
    broken = (*sandbox_module.root_plan(), ("bind", "/nonexistent/marft-probe"))
    monkeypatch.setattr(sandbox_module, "root_plan", lambda: broken)
    result = box.run("x = 1", UnitTests(("assert x == 1",)))
    assert result.failure == "sandbox_error", result
    assert base not in result.detail and "<sandbox>" in result.detail, result.detail
    monkeypatch.undo()
    # A cgroup that cannot be made: the error names the cgroup's folder.
    parent = "/nonexistent-cgroups/marft-probe"
    monkeypatch.setattr(sandbox_module, "memory_cgroups", lambda: MemoryCgroups(parent, 2))
    result = box.run("x = 1", UnitTests(("assert x == 1",)))
    assert result.failure == "sandbox_error", result
    assert parent not in result.detail and "<cgroup>" in result.detail, result.detail


# --- the filter itself, on every machine it knows -------------------------------------------------


def _run_filter(program, nr: int, arch: int, arg0: int = 0) -> int:
    """Run a classic-BPF seccomp program on one call (the few instructions the filter uses)."""
    data = {0: nr, 4: arch, 16: arg0 & 0xFFFFFFFF}
    accumulator, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:  # load a word of seccomp_data
            accumulator, pc = data[k], pc + 1
        elif code == 0x06:  # return
            return k
        else:
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: bool(accumulator & k)}
            pc += 1 + (jt if taken[code] else jf)


@pytest.mark.parametrize("machine", list(_SYSCALLS))
@pytest.mark.parametrize("deny_shared_memory", [False, True])
def test_the_filter_refuses_exactly_what_it_says(machine, deny_shared_memory):
    arch, numbers = _SYSCALLS[machine]
    program = _harness._filter_program(machine, deny_shared_memory)
    allow, eperm, enosys = 0x7FFF0000, 0x00050001, 0x00050026
    verdicts = {
        "add_key": eperm,
        "request_key": eperm,
        "keyctl": eperm,
        "clone3": enosys,
        "shmget": eperm if deny_shared_memory else allow,
        "memfd_create": eperm if deny_shared_memory else allow,
        "unshare": allow,  # without CLONE_NEWUSER
        "clone": allow,
    }
    for name, verdict in verdicts.items():
        assert _run_filter(program, numbers[name], arch) == verdict, name
    for name in ("unshare", "clone"):
        newuser = 0x10000000 | 0x11  # with other flags beside it
        assert _run_filter(program, numbers[name], arch, newuser) == eperm, name
    assert _run_filter(program, 0, arch) == allow  # any other call (read on x86_64, io_setup)
    assert _run_filter(program, numbers["add_key"], 0x40000003) == enosys  # i386: another ABI
    if machine == "x86_64":
        assert _run_filter(program, 0x40000000 | numbers["keyctl"], arch) == enosys  # x32
    assert _harness._filter_program("sparc64", deny_shared_memory) is None


def test_a_machine_without_the_filter_is_named_in_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(sandbox_module.platform, "machine", lambda: "riscv64")
    sandbox_module._warn_without_syscall_filter.cache_clear()
    try:
        with caplog.at_level("WARNING", logger=sandbox_module.__name__):
            sandbox_module._warn_without_syscall_filter()
    finally:
        sandbox_module._warn_without_syscall_filter.cache_clear()
    assert "no syscall filter for riscv64" in caplog.text and "kernel keys" in caplog.text
