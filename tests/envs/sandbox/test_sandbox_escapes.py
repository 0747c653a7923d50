"""Reward hacks and escapes found by attacking the sandbox through its public API.

Each program here would earn reward (or see what it must not) if its trick worked: shadowing a
builtin the tests call, reading the hidden tests from disk, leaking host files through the failure
message, reaching a unix socket on the host, using many processes to hold more memory than one
run may, and running unconfined where namespaces are not permitted.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import socket
import sys
import sysconfig
import threading
from pathlib import Path

import pytest

from marft_envs.code.data import load_dataset
from marft_envs.sandbox import runner as sandbox_module
from marft_envs.sandbox.confinement import _venv_config, interpreter
from marft_envs.sandbox.runner import Sandbox, SandboxLimits, UnitTests, namespaces_available

LIMITS = SandboxLimits(cpu_seconds=4, wall_seconds=10.0, memory_bytes=512 << 20)
REPO = Path(__file__).resolve().parents[3]


# --- 1. builtins the tests call -------------------------------------------------------------------

# For each builtin that a shipped test calls, a test that only its shadow can pass for the wrong
# solution ``def f(x): return None``, and the shadow that would pass it.
SHADOWED = {
    "set": ("assert set(f([1, 2])) == set([1, 2])", "def set(*a, **k):\n    return 0"),
    "sum": ("assert sum(f(3)) == 6", "def sum(*a, **k):\n    return 6"),
    "str": ("assert str(f(2)) == '4'", "def str(*a, **k):\n    return '4'"),
    "range": (
        "for i in range(3):\n    assert f(i) == i * i",
        "def range(*a, **k):\n    return ()",
    ),
    "abs": ("assert abs(f(-2.0)) == 2.0", "def abs(x):\n    return 2.0"),
    "tuple": ("assert tuple(f(1)) == (1, 2)", "def tuple(*a, **k):\n    return (1, 2)"),
    "len": ("assert len(f(3)) == 3", "def len(*a, **k):\n    return 3"),
    "list": ("assert list(f(2)) == [2]", "list = lambda *a, **k: [2]"),
    "print": ("assert print(f(1)) == 2", "def print(*a, **k):\n    return 2"),
    "isinstance": ("assert isinstance(f(1), int)", "isinstance = lambda *a: True"),
}


@pytest.mark.parametrize("name", list(SHADOWED))
def test_a_program_shadowing_a_builtin_earns_nothing(sandbox, name):
    test, shadow = SHADOWED[name]
    program = f"def f(x):\n    return None\n\n{shadow}\n"
    result = sandbox.run(program, UnitTests((test,)))
    assert result.passed == 0, result
    # The tests see the real builtin, whatever the program named.
    same = sandbox.run(program, UnitTests((f"import builtins\nassert {name} is builtins.{name}",)))
    assert same.all_passed, same


def test_an_entry_point_named_like_a_builtin_is_the_programs(sandbox):
    # MBPP 126 asks for `sum(a, b)`: the tests call the program's sum, and no other shadow.
    program = "def sum(a, b):\n    return a + b\n\ndef len(x):\n    return 0\n"
    tests = UnitTests(("assert sum(10, 15) == 25", "assert len('abc') == 3"), entry_point="sum")
    assert sandbox.run(program, tests).all_passed
    wrong = "def sum(a, b):\n    return 0\n"
    assert sandbox.run(wrong, tests).outcomes == (False, True)
    with pytest.raises(ValueError, match="entry_point"):
        UnitTests(("assert True",), entry_point="not a name")


def _builtins_called(problem) -> set[str]:
    names = set()
    for code in (*problem.tests, problem.setup):
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Name) and hasattr(builtins, node.id):
                names.add(node.id)
    return names - {"True", "False", "None", "AssertionError"}


def test_builtin_shadowing_earns_nothing_on_any_shipped_problem(shared_data, sandbox):
    jobs, ids = [], []
    for file in ("mbpp_sanitized.json", "humaneval.jsonl"):
        for problem in load_dataset(shared_data / file, validate=False):
            called = _builtins_called(problem)
            if not called:
                continue
            shadows = "\n".join(
                f"def {b}(*a, **k):\n    return {'()' if b == 'range' else 0}"
                for b in sorted(called)
            )
            wrong = f"def {problem.entry_point}(*a, **k):\n    return None\n{shadows}\n"
            jobs.append((problem.program(wrong), problem.unit_tests))
            ids.append(problem.id)
    assert len(jobs) == 6 + 17  # the rows whose tests call a builtin by name
    results = sandbox.run_many(jobs)
    assert [i for i, r in zip(ids, results, strict=True) if r.all_passed] == []


# --- 2. reading the tests, the project, the host ------------------------------------------------

SECRETS = [
    "/etc/passwd",
    "/etc/hostname",
    str(REPO / "marft_envs" / "sandbox" / "runner.py"),
    str(REPO / "pyproject.toml"),
    str(Path(os.environ["MARFT_DATA"]) / "mbpp_sanitized.json"),
    str(Path(os.environ["MARFT_DATA"]) / "humaneval.jsonl"),
    os.path.join(sysconfig.get_paths()["purelib"], "marft-probe-missing-is-fine"),
    "/proc/1/environ",
    "/proc/self/mountinfo",
    "/sys/kernel/hostname",
]


def test_the_program_reads_no_host_file(sandbox, tmp_path):
    planted = tmp_path / "hidden_tests.json"
    planted.write_text('{"expected": 42}')
    planted.chmod(0o644)
    for parent in (tmp_path, *tmp_path.parents):
        if parent != Path("/"):
            parent.chmod(parent.stat().st_mode | 0o005)
    paths = [*SECRETS, str(planted)]
    program = (
        f"PATHS = {paths!r}\n"
        "def readable():\n"
        "    got = []\n"
        "    for p in PATHS:\n"
        "        try:\n"
        "            with open(p, 'rb') as f:\n"
        "                f.read(1)\n"
        "            got.append(p)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return got\n"
    )
    result = sandbox.run(program, UnitTests(("assert readable() == []",)))
    assert result.all_passed, result


def _interpreter_file(path: str) -> bool:
    """A file of the Python installation (not its site-packages) or a shared library it loads."""
    stdlib = sysconfig.get_paths()["stdlib"]
    if path.startswith(stdlib + os.sep):
        return f"{os.sep}site-packages{os.sep}" not in path
    name = os.path.basename(path)
    return path in (sys.executable, os.path.realpath(sys.executable)) or ".so" in name


def test_no_file_outside_the_interpreters_is_readable(sandbox):
    program = (
        "import os\n"
        "def readable():\n"
        "    found = []\n"
        "    for top, dirs, files in os.walk('/'):\n"
        "        for name in files:\n"
        "            path = os.path.join(top, name)\n"
        "            try:\n"
        "                with open(path, 'rb') as f:\n"
        "                    f.read(1)\n"
        "            except OSError:\n"
        "                continue\n"
        "            found.append(os.path.realpath(path))\n"
        "    return found\n"
    )
    tests = UnitTests(("found = readable()\nassert len(found) > 100",))
    assert sandbox.run(program, tests).all_passed  # the walk works and finds the stdlib...
    check = UnitTests(("outside = [p for p in readable() if not inside(p)]\nassert outside == []",))
    # Resolved here: a venv's bin/python links out of the sandbox's root, where it does not resolve.
    exe = interpreter()
    setup = f"import os\nSTDLIB = {sysconfig.get_paths()['stdlib']!r}\nEXE = {exe!r}\n"
    setup += f"CONFIG = {tuple(_venv_config(exe))!r}\n"  # a copied venv binary reads pyvenv.cfg
    setup += (
        "def inside(path):\n"
        "    if path.startswith(STDLIB + os.sep):\n"
        "        return os.sep + 'site-packages' + os.sep not in path\n"
        "    return path == EXE or path in CONFIG or '.so' in os.path.basename(path)\n"
    )
    result = sandbox.run(program, UnitTests(check.tests, setup))
    assert result.all_passed, result  # ...and nothing else
    assert _interpreter_file(sysconfig.get_paths()["stdlib"] + "/os.py")


def test_the_working_directory_is_private_and_writable(sandbox):
    program = (
        "import os, tempfile\n"
        "def probe():\n"
        "    with open('note.txt', 'w') as f:\n"
        "        f.write('x' * 100)\n"
        "    with tempfile.NamedTemporaryFile() as f:\n"
        "        f.write(b'y')\n"
        "    return sorted(os.listdir('.'))\n"
    )
    result = sandbox.run(program, UnitTests(("assert probe() == ['note.txt']",)))
    assert result.all_passed, result


# The hack of reading the answers from the shipped files: every `assert NAME(ARGS) == EXPECTED`
# of every row, looked up by the arguments of the call.
READ_THE_TESTS = """
import ast, json
def _answer(*args):
    for path in PATHS:
        try:
            text = open(path).read()
        except OSError:
            continue
        rows = json.loads(text) if text.lstrip().startswith("[") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
        for row in rows:
            for test in row.get("test_list", []) + [row.get("test", "")]:
                for node in ast.walk(ast.parse(test)):
                    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call):
                        try:
                            got = tuple(ast.literal_eval(a) for a in node.left.args)
                            if got == args:
                                return ast.literal_eval(node.comparators[0])
                        except Exception:
                            pass
    return None
"""


def _read_the_tests_jobs(shared_data, per_file):
    paths = [str(shared_data / "mbpp_sanitized.json"), str(shared_data / "humaneval.jsonl")]
    jobs = []
    for file in ("mbpp_sanitized.json", "humaneval.jsonl"):
        problems = list(load_dataset(shared_data / file, validate=False))
        for problem in problems[:per_file]:
            hack = f"PATHS = {paths!r}\n{READ_THE_TESTS}\n{problem.entry_point} = _answer\n"
            jobs.append((problem.id, problem.program(hack), problem.unit_tests))
    return jobs


def test_reading_the_shipped_tests_earns_nothing(shared_data, sandbox):
    jobs = _read_the_tests_jobs(shared_data, per_file=12)
    results = sandbox.run_many([(p, t) for _, p, t in jobs])
    assert [i for (i, _, _), r in zip(jobs, results, strict=True) if r.passed] == []


@pytest.mark.slow
def test_reading_the_shipped_tests_earns_nothing_on_any_problem(shared_data, sandbox):
    jobs = _read_the_tests_jobs(shared_data, per_file=10_000)
    assert len(jobs) == 427 + 164
    results = sandbox.run_many([(p, t) for _, p, t in jobs])
    assert [i for (i, _, _), r in zip(jobs, results, strict=True) if r.all_passed] == []


# --- 3. what a failure reports ----------------------------------------------------------------------


def test_failure_detail_is_bounded_and_printable(sandbox):
    program = (
        "def f(x):\n"
        "    raise ValueError('\\x1b[31m' + 'A' * 5000 + '\\nroot:x:0:0\\r\\x00\\u202e' + 'B' * 100)\n"
    )
    result = sandbox.run(program, UnitTests(("assert f(1) == 1",)))
    assert result.failure == "runtime_error"
    detail = result.detail
    assert detail.startswith("ValueError: ")
    assert len(detail) <= sandbox_module.DETAIL_CHARS
    assert detail.isprintable() and "\x1b" not in detail and "root:x" not in detail, detail


# --- 4. unix sockets on the host ---------------------------------------------------------------


def test_no_connection_to_a_unix_socket_in_a_world_writable_folder(sandbox, tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o1777)
    for parent in tmp_path.parents:
        if parent != Path("/"):
            parent.chmod(parent.stat().st_mode | 0o005)
    tmp_path.chmod(0o755)
    paths = [str(folder / "agent.sock"), f"/tmp/marft-unix-{os.getpid()}.sock"]
    abstract_name = f"\0marft-unix-{os.getpid()}"
    servers, got = [], []
    for path in paths:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        os.chmod(path, 0o777)
        server.listen(4)
        server.settimeout(0.1)
        servers.append(server)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(abstract_name)
    abstract.listen(4)
    abstract.settimeout(0.1)
    servers.append(abstract)
    done = threading.Event()

    def accept(server):
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            got.append(conn.recv(100))
            conn.close()

    threads = [threading.Thread(target=accept, args=(s,)) for s in servers]
    for thread in threads:
        thread.start()
    program = (
        "import socket\n"
        f"PATHS = {[*paths, abstract_name]!r}\n"
        "def reached():\n"
        "    n = 0\n"
        "    for path in PATHS:\n"
        "        try:\n"
        "            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "            s.settimeout(2)\n"
        "            s.connect(path)\n"
        "            s.sendall(b'PWN-unix')\n"
        "            n += 1\n"
        "        except OSError:\n"
        "            pass\n"
        "    return n\n"
    )
    try:
        result = sandbox.run(program, UnitTests(("assert reached() == 0",)))
    finally:
        done.set()
        for thread in threads:
            thread.join()
        for server in servers:
            server.close()
        for path in paths:
            Path(path).unlink(missing_ok=True)
    assert got == [] and result.all_passed, (got, result)


# --- 5. memory of the whole process tree ----------------------------------------------------------

MANY_PROCESSES = """
import os, time
def f(x):
    pids = []
    for _ in range(3):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            block = bytearray(MB << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            os.write(w, b"k")
            time.sleep(60)  # hold the memory until the run ends
            os._exit(0)
        os.close(w)
        pids.append(pid)
        if os.read(r, 1) != b"k":
            return None
    # Every child still holds its block: all of it at once.
    if any(os.waitpid(pid, os.WNOHANG) != (0, 0) for pid in pids):
        return None
    return x
"""


@pytest.mark.parametrize("how", ["cgroup", "accounting"])
def test_the_whole_process_tree_is_bounded(sandbox, monkeypatch, how):
    limits = SandboxLimits(cpu_seconds=4, wall_seconds=10.0, memory_bytes=256 << 20)
    if how == "cgroup" and sandbox_module.memory_cgroups() is None:
        pytest.skip("no memory cgroup can be created here")
    if how == "accounting":
        monkeypatch.setattr(sandbox_module, "memory_cgroups", lambda: None)
    assert sandbox_module.tree_memory_limit_available()
    box = Sandbox(limits, isolation="namespaces", max_workers=1)
    try:
        # 3 children of 200 MB each: within each process's limit, 600 MB for the tree.
        big = box.run(MANY_PROCESSES.replace("MB", "200"), UnitTests(("assert f(7) == 7",)))
        small = box.run(MANY_PROCESSES.replace("MB", "20"), UnitTests(("assert f(7) == 7",)))
    finally:
        box.close()
    assert big.passed == 0 and big.failure == "memory", big
    assert small.all_passed, small


def test_the_worker_pool_is_sized_from_free_memory(monkeypatch):
    if not namespaces_available():
        pytest.skip("unshare may not create namespaces here")
    limits = SandboxLimits(memory_bytes=1 << 30)
    monkeypatch.setattr(sandbox_module, "_available_memory", lambda: 3 << 30)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    box = Sandbox(limits)
    assert box.max_workers == 3 * (1 << 30) // sandbox_module.run_memory_bound(limits)
    assert 1 <= box.max_workers < 8
    monkeypatch.setattr(sandbox_module, "_available_memory", lambda: 1 << 20)
    assert Sandbox(limits).max_workers == 1  # at least one, however little is free


# --- 6. fail closed without namespaces ----------------------------------------------------------


def test_the_default_fails_closed_without_namespaces(monkeypatch):
    monkeypatch.setattr(sandbox_module, "namespaces_available", lambda: False)
    monkeypatch.setattr(sandbox_module, "_stdlib_world_readable", lambda: True)
    monkeypatch.setattr(sandbox_module, "_DEFAULT", None)
    for make in (Sandbox, lambda: Sandbox(isolation="auto"), sandbox_module.default_sandbox):
        with pytest.raises(OSError, match=r"isolation='process'"):
            make()
    assert sandbox_module.available_isolation() is None


def test_failure_reports_are_json_safe(sandbox):
    # A detail with every kind of character still crosses the report intact as one JSON line.
    result = sandbox.run(
        "def f(x):\n    raise KeyError('\\ud800' + chr(0))\n", UnitTests(("f(1)",))
    )
    assert result.failure == "runtime_error" and json.dumps(result.detail)


def test_a_private_root_that_cannot_be_built_fails_closed(monkeypatch):
    if not namespaces_available():
        pytest.skip("unshare may not create namespaces here")
    broken = (*sandbox_module.root_plan(), ("bind", "/nonexistent/marft-probe"))
    monkeypatch.setattr(sandbox_module, "root_plan", lambda: broken)
    sandbox_module._check_private_root.cache_clear()
    try:
        with pytest.raises(OSError, match=r"private root.*isolation='process'"):
            Sandbox()
    finally:
        sandbox_module._check_private_root.cache_clear()
