"""The sandbox against hostile programs: real processes, no mocks.

Each hostile program gets reward 0 (no test passes) or has no effect outside its sandbox, and this
test process survives. Programs that *would* pass if their trick worked are written so that the
trick is the only way to pass.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from marft_envs.sandbox.runner import (
    FAILURE_KINDS,
    Sandbox,
    SandboxLimits,
    UnitTests,
    _parse_report,
    _stdlib_world_readable,
    _Untrusted,
)

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=6.0, memory_bytes=512 << 20)


ADD_TESTS = UnitTests(("assert add(1, 2) == 3", "assert add(5, 0) == 5", "assert add(10, 5) == 15"))


def _owned_by(uids: set[int] | None = None) -> list[int]:
    """Real uids of the processes whose uid is in ``uids`` (None: the sandbox's private range)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if (uid in uids) if uids is not None else uid >= 100_000:
            found.append(uid)
    return found


def _assert_no_leftovers(uids: set[int]) -> None:
    """No process of this test's runs is left. Other runs on the machine (another test session,
    a training job) may hold uids of the same range at any time, so only ``uids`` count; the
    generous deadline only matters on failure."""
    deadline = time.monotonic() + 30
    while _owned_by(uids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _owned_by(uids) == []


def test_a_correct_program_passes_and_a_wrong_one_fails(sandbox):
    good = sandbox.run("def add(a, b):\n    return a + b\n", ADD_TESTS)
    assert good.all_passed and good.passed == 3 and good.failure is None
    assert good.isolation == "namespaces"
    wrong = sandbox.run("def add(a, b):\n    return a - b\n", ADD_TESTS)
    assert wrong.outcomes == (False, True, False)
    assert wrong.failure == "wrong_answer" and not wrong.all_passed


def test_failure_kinds_are_named(sandbox):
    results = sandbox.run_many(
        [
            ("def add(a, b)\n    return a + b\n", ADD_TESTS),
            ("def add(a, b):\n    raise ValueError('nope')\n", ADD_TESTS),
            (
                "import collections, math, re, heapq, itertools, typing\ndef add(a, b):\n    return math.fsum([a, b])\n",
                ADD_TESTS,
            ),
        ]
    )
    assert results[0].failure == "syntax_error" and results[0].passed == 0
    assert results[1].failure == "runtime_error" and "ValueError: nope" in results[1].detail
    # Standard-library imports work inside the sandbox; fsum returns floats, equal to the ints.
    assert results[2].all_passed
    assert set(r.failure for r in results) <= set(FAILURE_KINDS) | {None}


def test_plain_values_cross_and_tests_expecting_exceptions_work(sandbox):
    program = (
        "import collections, re\n"
        "def count(xs):\n    return collections.Counter(xs)\n"
        "def match(s):\n    return re.match('a+', s)\n"
        "def check(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
    )
    tests = UnitTests(
        (
            "assert count('abca') == {'a': 2, 'b': 1, 'c': 1}",  # a Counter arrives as a dict
            "assert match('aab') and not match('b')",  # non-plain objects keep their truth value
            "try:\n    check(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError",
        )
    )
    assert sandbox.run(program, tests).all_passed


HOSTILE = {
    "infinite loop": ("def add(a, b):\n    while True:\n        pass\n", "timeout"),
    "infinite loop at import": ("while True:\n    pass\n", "timeout"),
    "memory hog": ("def add(a, b):\n    x = bytearray(2 << 30)\n    return a + b\n", "memory"),
    "growing memory": (
        "def add(a, b):\n    x = []\n    while True:\n        x.append(' ' * 10**6)\n",
        "memory",
    ),
    "fork storm": ("import os\nwhile True:\n    os.fork()\n", None),
    "sys.exit(0)": ("import sys\nsys.exit(0)\n", "exited"),
    "sys.exit in the function": ("import sys\ndef add(a, b):\n    sys.exit(0)\n", "exited"),
    "os._exit(0)": ("import os\ndef add(a, b):\n    os._exit(0)\n", "exited"),
    "fake pass lines": (
        "import os, sys\n"
        "for fd in range(1, 40):\n"
        "    try:\n"
        '        os.write(fd, b\'{"nonce": "x", "results": [{"passed": true, "kind": null}]}\\nPASS\\nok\\n\')\n'
        "    except OSError:\n"
        "        pass\n"
        "print('3 passed'); print('ALL TESTS PASSED', file=sys.stderr)\n"
        "def add(a, b):\n    return 0\n",
        "runtime_error",  # it wrote on the program's reply channel: garbage, never a pass
    ),
    "kill the parent": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return 0\n",
        None,
    ),
    "kill everything": (
        "import os, signal\n"
        "for target in (lambda: os.kill(-1, signal.SIGKILL), lambda: os.killpg(0, signal.SIGKILL), lambda: os.kill(1, signal.SIGKILL)):\n"
        "    try:\n        target()\n    except OSError:\n        pass\n"
        "def add(a, b):\n    return 0\n",
        None,
    ),
    "always-equal object": (
        "class Anything:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Anything()\n",
        "wrong_answer",
    ),
    "int subclass equal to anything": (
        "class Int(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Int(0)\n",
        "wrong_answer",
    ),
    "monkeypatched builtins": (
        "import builtins\n"
        "class Quiet(Exception):\n    pass\n"
        "builtins.AssertionError = Quiet\nbuiltins.abs = lambda x: 0\n"
        "def add(a, b):\n    return 0\n",
        "wrong_answer",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_program_earns_nothing(sandbox, run_uids, name):
    program, kind = HOSTILE[name]
    result = sandbox.run(program, ADD_TESTS)
    assert result.passed == 0 and not result.all_passed, result
    if kind is not None:
        assert result.failure == kind, result
    assert result.failure in FAILURE_KINDS
    # Whatever the program did, no process of its run is left.
    _assert_no_leftovers(run_uids)


FOREIGN_UID = 1073841831  # beyond the range Sandbox draws its uids from


@pytest.fixture
def foreign_run():
    """A process of another sandbox run on this machine (another test session, a training job on
    a code env): it holds a uid of the sandbox's private range while this test runs."""
    if os.geteuid() != 0:
        pytest.skip("only root can start a process under another uid")
    proc = subprocess.Popen(["sleep", "600"], user=FOREIGN_UID)
    try:
        while not _owned_by({FOREIGN_UID}):  # setuid happens before exec; poll ends at once
            if proc.poll() is not None:
                pytest.fail("the stand-in for another run exited early")
            time.sleep(0.01)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_the_leftover_check_ignores_other_runs_on_the_machine(sandbox, run_uids, foreign_run):
    # A loaded machine runs other sandboxes at the same time; only this run's processes count.
    assert sandbox.run("def add(a, b):\n    return a + b\n", ADD_TESTS).all_passed
    assert run_uids and FOREIGN_UID not in run_uids
    _assert_no_leftovers(run_uids)
    assert foreign_run.poll() is None  # the other run's process was there all along


def test_orphans_that_leave_the_process_group_are_killed(sandbox, run_uids):
    program = (
        "import os, time\n"
        "def add(a, b):\n"
        "    if a == 1:\n"
        "        for _ in range(2):\n"
        "            if os.fork() == 0:\n"
        "                os.setsid()\n"
        "                time.sleep(1000)\n"
        "    return a + b\n"
    )
    assert sandbox.run(program, ADD_TESTS).all_passed  # the program did its job...
    _assert_no_leftovers(run_uids)  # ...and its sleepers died with the run


def test_no_write_outside_the_working_directory(sandbox, tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    targets = [str(open_dir / "escaped"), f"/dev/shm/marft-escape-{os.getpid()}"]
    private = f"/tmp/marft-escape-{os.getpid()}"  # the run's own /tmp: writable, not the host's
    program = (
        "import os\n"
        f"TARGETS = {targets!r}\n"
        f"open({private!r}, 'w').write('inside')\n"
        "def add(a, b):\n"
        "    wrote = 0\n"
        "    for path in TARGETS:\n"
        "        try:\n"
        "            with open(path, 'w') as f:\n"
        "                f.write('escaped')\n"
        "            wrote += 1\n"
        "        except OSError:\n"
        "            pass\n"
        "    with open('inside.txt', 'w') as f:\n"  # the working directory is writable
        "        f.write('fine')\n"
        "    return a + b + 1000 * wrote\n"
    )
    result = sandbox.run(program, ADD_TESTS)
    assert result.all_passed  # every write outside failed, the one inside worked
    for path in [*targets, private]:
        assert not Path(path).exists()


def test_no_connection_to_a_listener_on_localhost(sandbox):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.1)
    port = server.getsockname()[1]
    accepted = []
    done = threading.Event()

    def accept():
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=accept)
    thread.start()
    program = (
        "import socket\n"
        "def add(a, b):\n"
        f"    s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    s.sendall(b'leak')\n"
        "    return a + b\n"
    )
    result = sandbox.run(program, ADD_TESTS)
    time.sleep(0.3)  # a connection that got through would be accepted by now
    done.set()
    thread.join()
    server.close()
    assert result.passed == 0 and result.failure == "runtime_error"
    assert accepted == []


def test_no_secrets_in_the_environment(sandbox, monkeypatch):
    monkeypatch.setenv("MARFT_TEST_SECRET", "hunter2-secret")
    program = (
        "import os\n"
        "def leak():\n"
        "    seen = ' '.join(f'{k}={v}' for k, v in os.environ.items())\n"
        f"    for pid in ('self', '1', {os.getpid()}, {os.getppid()}):\n"
        "        try:\n"
        "            seen += open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace')\n"
        "        except OSError:\n"
        "            pass\n"
        "    return seen\n"
    )
    tests = UnitTests(("assert 'hunter2' not in leak()", "assert 'PATH=' in leak()"))
    result = sandbox.run(program, tests)
    assert result.all_passed, result  # the program saw an environment, without the secret


def test_the_program_never_holds_the_tests(sandbox):
    program = (
        "import gc\n"
        "NEEDLE = 'expected' + '-marker-' + str(4242)\n"
        "def probe():\n"
        "    return any(isinstance(o, str) and NEEDLE in o and o is not NEEDLE for o in gc.get_objects())\n"
    )
    tests = UnitTests(("assert probe() is False", "note = 'expected-marker-4242'\nassert note"))
    assert sandbox.run(program, tests).all_passed


def test_report_without_the_nonce_or_with_a_wrong_count_is_rejected():
    good = b'{"nonce": "abc", "results": [{"passed": true, "kind": null, "detail": ""}]}\n'
    assert _parse_report(good, b"", "abc", 1) == ([None], [""])
    with pytest.raises(_Untrusted, match="nonce"):
        _parse_report(good, b"", "other", 1)
    with pytest.raises(_Untrusted, match="1 results for 2 tests"):
        _parse_report(good, b"", "abc", 2)
    with pytest.raises(_Untrusted, match="one report line"):
        _parse_report(good + good, b"", "abc", 1)
    with pytest.raises(_Untrusted, match="one report line"):
        _parse_report(b"", b"Traceback", "abc", 1)
    with pytest.raises(_Untrusted, match="malformed"):
        _parse_report(b"PASS\n", b"", "abc", 1)


def test_bad_limits_and_arguments_get_clear_errors():
    with pytest.raises(ValueError, match="cpu_seconds"):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(ValueError, match="64 MiB"):
        SandboxLimits(memory_bytes=1 << 20)
    with pytest.raises(ValueError, match="isolation"):
        Sandbox(isolation="docker")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one test"):
        UnitTests(())
    with pytest.raises(TypeError, match="sequence of code strings"):
        UnitTests("assert True")  # type: ignore[arg-type]


def test_runs_in_the_worker_pool_overlap(sandbox):
    program = "import time\ndef add(a, b):\n    time.sleep(1.0)\n    return a + b\n"
    start = time.perf_counter()
    results = sandbox.run_many([(program, ADD_TESTS)] * 2)
    elapsed = time.perf_counter() - start
    assert all(r.all_passed for r in results)
    # Serial runs would take the sum of their times; two workers take about the longer one.
    assert elapsed < 0.8 * sum(r.seconds for r in results), (elapsed, [r.seconds for r in results])


# The fallback: what it claims to hold (limits, exits, fake output, plain values) without namespaces.
FALLBACK_SAFE = [
    "infinite loop",
    "memory hog",
    "sys.exit(0)",
    "os._exit(0)",
    "fake pass lines",
    "always-equal object",
    "int subclass equal to anything",
    "monkeypatched builtins",
]
ROOT_WITHOUT_PRIVATE_UID = os.geteuid() == 0 and not _stdlib_world_readable()


def test_fallback_mode_still_grades_hostile_programs_zero(monkeypatch):
    if ROOT_WITHOUT_PRIVATE_UID:
        # These programs import only modules the runner already holds, so a private uid that
        # cannot read the standard library still runs them: the fallback's real code path.
        monkeypatch.setattr("marft_envs.sandbox.runner._stdlib_world_readable", lambda: True)
    box = Sandbox(LIMITS, isolation="process", max_workers=2)
    results = box.run_many([(HOSTILE[name][0], ADD_TESTS) for name in FALLBACK_SAFE])
    box.close()
    for name, result in zip(FALLBACK_SAFE, results, strict=True):
        assert result.isolation == "process"
        assert result.passed == 0, (name, result)
        assert result.failure == HOSTILE[name][1], (name, result)
    assert box.run("def add(a, b):\n    return a + b\n", ADD_TESTS).all_passed


@pytest.mark.skipif(
    not ROOT_WITHOUT_PRIVATE_UID, reason="only as root with a private standard library"
)
def test_fallback_refuses_to_run_programs_as_root():
    with pytest.raises(OSError, match=r"cannot run programs as root safely.*namespaces"):
        Sandbox(isolation="process")
