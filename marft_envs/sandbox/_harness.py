"""The process that runs inside the sandbox (see :mod:`marft_envs.sandbox.runner`).

Run as ``python -I -S _harness.py``; standard library only, nothing from marft. Two processes:

- the **tester** (this script's main process) reads the job from stdin, forks the runner, runs the
  tests and writes the one report line on stdout;
- the **runner** (forked child) drops to an unprivileged uid and its resource limits, installs the
  syscall filter (kernel keys, user namespaces; see ``_filter_program``), executes the
  untrusted program, then serves calls: the tester's test code calls stand-ins for the program's
  functions, the runner calls the real ones and sends back the return value.

Why two processes: the untrusted program never holds the tests, the report channel or the nonce
(it is forked before they are read), and every comparison happens in the tester on plain values
(``None``, bool, int, float, complex, str, bytes, and lists, tuples, dicts, sets of them, exact
types only) decoded from the runner's replies, so no object the program builds can take part in
an assertion (an ``__eq__`` that always returns True never runs).

Stdin: one JSON header line (``program_bytes``, limits, ...), the program (exactly
``program_bytes`` bytes), then one JSON line with the tests and the nonce.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import select
import signal
import struct
import sys
import time

_MAX_DEPTH = 100
_HEADER = struct.Struct("!Q")


class _NotPlain(TypeError):
    pass


# --- plain values <-> JSON (both processes) ------------------------------------------------------


_BASES = (str, int, float, bytes, list, tuple, dict, set, frozenset)


def _encode(value, depth=0):
    """Plain data as JSON; subclasses of plain types become their base type, other objects opaque.

    Conversions build fresh objects of the exact base type (e.g. a ``Counter`` becomes a ``dict``),
    so no method of the program's classes survives into the tests. Other objects (a ``re.Match``,
    a generator) cross as an opaque token that equals only itself and keeps only its truth value.
    """
    if depth > _MAX_DEPTH:
        raise _NotPlain(f"a value nested deeper than {_MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return {"i": hex(value)}
    if kind is float:
        return {"f": value.hex()}
    if kind is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is list:
        return [_encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"t": [_encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"d": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        tag = "s" if kind is set else "z"
        return {tag: [_encode(v, depth + 1) for v in value]}
    for base in _BASES:
        if isinstance(value, base):
            if base is int:
                plain = int.__index__(value)
            elif base is float:
                plain = float.__float__(value)
            elif base is str:
                plain = str.__str__(value)
            elif base is bytes:
                plain = bytes(memoryview(value))
            else:
                plain = base(value)
            if type(plain) is not base:
                raise _NotPlain(f"a {kind.__name__} object is not a plain value")
            return _encode(plain, depth + 1)
    return {"o": [kind.__name__, bool(value)]}


def _decode(data):
    if data is None or type(data) in (bool, str):
        return data
    if type(data) is list:
        return [_decode(v) for v in data]
    ((tag, raw),) = data.items()
    if tag == "i":
        return int(raw, 16)
    if tag == "f":
        return float.fromhex(raw)
    if tag == "c":
        return complex(float.fromhex(raw[0]), float.fromhex(raw[1]))
    if tag == "b":
        return bytes.fromhex(raw)
    if tag == "t":
        return tuple(_decode(v) for v in raw)
    if tag == "d":
        return {_decode(k): _decode(v) for k, v in raw}
    if tag == "s":
        return {_decode(v) for v in raw}
    if tag == "z":
        return frozenset(_decode(v) for v in raw)
    if tag == "o":
        return _Opaque(str(raw[0]), raw[1] is True)
    raise ValueError(f"unknown tag {tag!r}")


class _Opaque:
    """An object the program returned that is not plain data: equal only to itself."""

    __slots__ = ("name", "truth")

    def __init__(self, name, truth):
        self.name, self.truth = name, truth

    def __bool__(self):
        return self.truth

    def __repr__(self):
        return f"<{self.name} object from the program>"


def _send(fd, obj):
    data = json.dumps(obj).encode()
    data = _HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _read_exact(fd, n, deadline=None):
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _receive(fd, limit, deadline=None):
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    if size > limit:
        raise OverflowError(f"message of {size} bytes is over the {limit}-byte limit")
    return json.loads(_read_exact(fd, size, deadline))


# --- the runner (untrusted program) --------------------------------------------------------------


# --- the syscall filter (runner, after the uid drop) ----------------------------------------------
#
# A seccomp filter, written as classic BPF by hand (no binding is needed for a dozen
# instructions). It refuses, for the program and every process it starts:
# - the kernel key calls (``add_key``, ``request_key``, ``keyctl``): a key belongs to the uid,
#   not to a process, so keys the program registered would outlive the run, outside its memory
#   limit;
# - a new user namespace (``unshare`` or ``clone`` with ``CLONE_NEWUSER``): inside one the program
#   would hold every capability and could mount what it likes. ``clone3`` passes its flags in
#   memory, which a filter cannot read: it fails with ``ENOSYS``, and the C library falls back to
#   ``clone`` (threads and processes still start);
# - where no memory cgroup counts the run (``deny_shared_memory``), SysV shared memory and memfd
#   files (``shmget``, ``memfd_create``): their pages belong to no process, so the fallback memory
#   watch, which sums the processes' resident memory, would not see them;
# - any call through another ABI (i386 or x32 on x86_64), whose numbers differ.

_SYSCALLS = {  # platform.machine() -> (AUDIT_ARCH_*, syscall numbers)
    "x86_64": (
        0xC000003E,
        {
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "unshare": 272,
            "clone": 56,
            "clone3": 435,
            "shmget": 29,
            "memfd_create": 319,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "unshare": 97,
            "clone": 220,
            "clone3": 435,
            "shmget": 194,
            "memfd_create": 279,
        },
    ),
}
#: The machines the syscall filter knows; elsewhere a run goes without it (the host warns).
SYSCALL_FILTER_MACHINES = tuple(_SYSCALLS)

_CLONE_NEWUSER = 0x10000000
_X32_SYSCALL_BIT = 0x40000000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|..|K, ...
# Offsets in struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # the low half of args[0] on a little-endian machine


def _filter_program(machine, deny_shared_memory):
    """The filter as ``(code, jt, jf, k)`` instructions, or ``None`` for an unknown machine."""
    import errno

    if machine not in _SYSCALLS:
        return None
    arch, nr = _SYSCALLS[machine]
    eperm, enosys = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    refused = [
        (nr["add_key"], eperm),
        (nr["request_key"], eperm),
        (nr["keyctl"], eperm),
        (nr["clone3"], enosys),
    ]
    if deny_shared_memory:
        refused += [(nr["shmget"], eperm), (nr["memfd_create"], eperm)]
    program = [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 1, 0, arch),  # another ABI: refused whole
        (_RET, 0, 0, enosys),
        (_LD_ABS, 0, 0, _NR),
    ]
    if machine == "x86_64":
        program += [(_JGE, 0, 1, _X32_SYSCALL_BIT), (_RET, 0, 0, enosys)]
    for number, verdict in refused:
        program += [(_JEQ, 0, 1, number), (_RET, 0, 0, verdict)]
    program += [
        (_JEQ, 2, 0, nr["unshare"]),  # to the flags check below
        (_JEQ, 1, 0, nr["clone"]),
        (_RET, 0, 0, _RET_ALLOW),
        (_LD_ABS, 0, 0, _ARG0_LOW),  # unshare(flags) and clone(flags, ...)
        (_JSET, 0, 1, _CLONE_NEWUSER),
        (_RET, 0, 0, eperm),
        (_RET, 0, 0, _RET_ALLOW),
    ]
    return program


def _install_filter(libc, program):
    """Install ``program`` for this process and its future children (needs ``no_new_privs``)."""
    import ctypes

    class Instruction(ctypes.Structure):  # struct sock_filter
        _fields_ = [
            ("code", ctypes.c_uint16),
            ("jt", ctypes.c_uint8),
            ("jf", ctypes.c_uint8),
            ("k", ctypes.c_uint32),
        ]

    class Program(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    instructions = (Instruction * len(program))(*[Instruction(*i) for i in program])
    fprog = Program(len(program), instructions)
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    ulong = ctypes.c_ulong
    if libc.prctl(
        pr_set_seccomp, ulong(seccomp_mode_filter), ctypes.byref(fprog), ulong(0), ulong(0)
    ):
        raise OSError(ctypes.get_errno(), "could not install the sandbox's syscall filter")


def _limit_runner(job):
    """Resource limits, the private uid, ``no_new_privs`` and the syscall filter; returns why the
    confinement could not be completed (the run then fails as a sandbox error), else ``None``."""
    import platform
    import resource

    try:  # imported before the uid drop: the new uid may not be able to read the library
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        libc = None
    program = None
    if sys.platform.startswith("linux"):
        program = _filter_program(platform.machine(), job.get("deny_shared_memory", False))

    def cap(which, value):
        if value is None or not hasattr(resource, which):
            return
        # An OS that does not enforce this limit raises; the others still hold.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(getattr(resource, which), value)

    cap("RLIMIT_CORE", (0, 0))
    cap("RLIMIT_CPU", (job["cpu_seconds"], job["cpu_seconds"] + 1))
    cap("RLIMIT_AS", (job["memory_bytes"], job["memory_bytes"]))
    cap("RLIMIT_FSIZE", (job["file_size_bytes"], job["file_size_bytes"]))
    cap("RLIMIT_NOFILE", (job["open_files"], job["open_files"]))
    # Counts every process of the uid: with a private uid, this run's; without one, all of the
    # user's (then the program can hardly fork at all, which is the safe side).
    cap("RLIMIT_NPROC", (job["processes"], job["processes"]))
    uid = job.get("uid")
    if uid is not None:
        # A uid of its own: the runner can signal no other process and own no other file.
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if libc is not None:  # no setuid binary may give privileges back
        with contextlib.suppress(AttributeError):
            libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    if program is not None:
        if libc is None:
            return "the sandbox's syscall filter needs ctypes, which is not available"
        try:
            _install_filter(libc, program)
        except OSError as err:
            return f"{err.strerror} (errno {err.errno}: {os.strerror(err.errno)})"
    return None


def _runner(job, program, call_fd, reply_fd, null, cgroup_fd):
    # The program can reach every frame of this process (``sys._getframe``): keep only the
    # limits in the job, which is also the dict ``main`` holds, so no host path (the run's root
    # under the host's temporary folder, its cgroup) is left to read.
    kept = {key: job.get(key) for key in _RUNNER_KEYS}
    job.clear()
    job.update(kept)
    if cgroup_fd is not None:
        # Into the run's memory cgroup before anything else: every process the program starts
        # is counted against one limit for the whole tree.
        os.write(cgroup_fd, b"0")
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    keep = sorted({0, 1, 2, call_fd, reply_fd})
    for low, high in zip(keep, [*keep[1:], 65536], strict=False):
        os.closerange(low + 1, high)
    os.chdir(job["workdir"])
    problem = _limit_runner(job)
    if problem is not None:
        _send(reply_fd, {"error": "sandbox_error", "detail": problem})
        os._exit(0)
    limit = job["message_bytes"]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        code = compile(program, "<program>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:
        _send(reply_fd, {"error": "syntax_error", "detail": f"{type(err).__name__}: {err}"})
        os._exit(0)
    try:
        exec(code, namespace)
    except BaseException as err:
        _send(reply_fd, {"error": _kind(type(err).__name__), "detail": _describe(err)})
        os._exit(0)
    names = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if type(value) is type(os):
            names[name] = {"m": str(getattr(value, "__name__", ""))}
        elif callable(value):
            names[name] = None
        else:
            with contextlib.suppress(_NotPlain):
                names[name] = {"v": _encode(value)}
    _send(reply_fd, {"names": names})
    while True:
        call = _receive(call_fd, limit)
        try:
            args = _decode(call["a"])
            kwargs = _decode(call["k"])
            result = namespace[call["n"]](*args, **kwargs)
            try:
                reply = {"v": _encode(result)}
            except _NotPlain as err:
                reply = {
                    "e": "TypeError",
                    "m": f"{call['n']} returned {err}",
                    "plain": False,
                }
        except BaseException as err:
            reply = {"e": type(err).__name__, "m": _describe(err)}
        data = json.dumps(reply).encode()
        if len(data) > limit:
            reply = {"e": "MemoryError", "m": f"the return value is over {limit} bytes"}
        _send(reply_fd, reply)


# What the runner keeps of the job: limits, its uid, and the working directory ("/tmp" in the
# private root; the host folder it already works in otherwise).
_RUNNER_KEYS = (
    "cpu_seconds", "memory_bytes", "file_size_bytes", "open_files", "processes", "uid",
    "deny_shared_memory", "workdir", "message_bytes",
)  # fmt: skip


def _describe(err):
    try:
        text = str(err)
    except BaseException:
        text = ""
    return (f"{type(err).__name__}: {text}")[:300]


def _kind(exc_name):
    if exc_name == "MemoryError":
        return "memory"
    if exc_name in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
        return "exited"
    return "runtime_error"


# --- the tester (trusted) ------------------------------------------------------------------------


class _ProgramFailure(BaseException):
    """The program failed in a way that is not a wrong value (kind: timeout, memory, exited...)."""

    def __init__(self, kind, detail):
        super().__init__(detail)
        self.kind = kind


class _Runner:
    """The tester's handle on the runner process."""

    def __init__(self, pid, call_fd, reply_fd, deadline, limit, cpu_seconds):
        self.pid, self.call_fd, self.reply_fd = pid, call_fd, reply_fd
        self.deadline, self.limit, self.cpu_seconds = deadline, limit, cpu_seconds
        self.dead = None  # (kind, detail) once the runner is gone

    def receive(self):
        if self.dead:
            raise _ProgramFailure(*self.dead)
        try:
            return _receive(self.reply_fd, self.limit, self.deadline)
        except TimeoutError:
            self.finish(("timeout", "the program ran past the time limit"))
        except EOFError:
            self.finish(None)
        except Exception:
            self.finish(("runtime_error", "the program wrote on the sandbox's channel"))
        raise _ProgramFailure(*self.dead)

    def finish(self, why):
        """End the runner: ``why=None`` waits (until the deadline) for it to end on its own."""
        if why is None:
            while True:
                pid, status, usage = os.wait4(self.pid, os.WNOHANG)
                if pid:
                    self.dead = _death(status, usage, self.cpu_seconds)
                    return
                if time.monotonic() > self.deadline:
                    why = ("timeout", "the program ran past the time limit")
                    break
                time.sleep(0.005)
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self.dead = why

    def call(self, name, args, kwargs):
        try:
            request = {"n": name, "a": _encode(list(args)), "k": _encode(dict(kwargs))}
        except _NotPlain as err:
            raise TypeError(
                f"the test passes {err} to {name}; only plain values cross the sandbox"
            ) from None
        if self.dead:
            raise _ProgramFailure(*self.dead)
        try:
            _send(self.call_fd, request)
        except OSError:
            self.finish(None)
            raise _ProgramFailure(*self.dead) from None
        reply = self.receive()
        if "v" in reply:
            try:
                return _decode(reply["v"])
            except Exception:
                raise _ProgramFailure(
                    "runtime_error", "unreadable reply from the program"
                ) from None
        name = str(reply.get("e"))
        message = str(reply.get("m"))
        if reply.get("plain") is False:
            raise _ProgramFailure("wrong_answer", message)
        if _kind(name) != "runtime_error":
            raise _ProgramFailure(_kind(name), message)
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not AssertionError:
            error = cls(message)  # so tests that expect e.g. a ValueError see one
        else:
            error = _ProgramFailure("runtime_error", message)
        error._from_program = True
        raise error


def _death(status, usage, cpu_seconds):
    """Why the runner ended, from its wait status and its resource usage: ``SIGXCPU`` and
    ``SIGKILL`` are how ``RLIMIT_CPU`` ends a process, but the program can send them too
    (``os.kill(-1, 9)``), so they mean a time-out only when the CPU time was actually used up."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = f" ({signal.Signals(sig).name})"
        except ValueError:
            name = ""
        used = usage.ru_utime + usage.ru_stime
        # The kernel sends them once the time is used up, by its own clock; the usage it
        # reports can read a few percent lower (measured: 1.92 s at a 2 s limit).
        if sig in (signal.SIGXCPU, signal.SIGKILL) and used >= 0.9 * cpu_seconds:
            return ("timeout", f"the program used up its CPU time ({cpu_seconds} s)")
        return ("runtime_error", f"the program's process was killed by signal {sig}{name}")
    return ("exited", f"the program ended its process (exit status {os.WEXITSTATUS(status)})")


# Modules a program may have imported that the tests may use by the program's name for them.
# fmt: off
_TEST_MODULES = frozenset([
    "abc", "array", "bisect", "calendar", "cmath", "collections", "collections.abc", "copy",
    "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "itertools",
    "json", "math", "operator", "random", "re", "statistics", "string", "sys", "time", "typing",
    "unicodedata",
])
# fmt: on


def _stub(runner, name):
    def call(*args, **kwargs):
        return runner.call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _run_tests(runner, suite):
    results = [{"passed": False, "kind": "not_run", "detail": ""} for _ in suite["tests"]]
    ready = None
    try:
        ready = runner.receive()
    except _ProgramFailure as err:
        kind = err.kind
        return [dict(r, kind=kind, detail=str(err)) for r in results]
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        if "error" in ready:
            return [
                dict(r, kind=str(ready["error"]), detail=str(ready.get("detail", "")))
                for r in results
            ]
        for name, value in dict(ready["names"]).items():
            if hasattr(builtins, str(name)) and name != suite.get("entry_point"):
                # The tests call the real builtins whatever the program named (``def set(*a):
                # return 0`` beside a wrong solution must not make ``set(f(x)) == set(y)`` pass).
                continue
            if value is None:
                namespace[str(name)] = _stub(runner, str(name))
            elif "m" in value:
                if value["m"] in _TEST_MODULES:
                    namespace[str(name)] = __import__(value["m"], fromlist=["_"])
            else:
                namespace[str(name)] = _decode(value["v"])
    except Exception:
        return [
            dict(r, kind="runtime_error", detail="unreadable message from the program")
            for r in results
        ]
    try:
        exec(compile(suite["setup"], "<test setup>", "exec"), namespace)
    except Exception as err:
        return [dict(r, kind="test_error", detail=_describe(err)) for r in results]
    for i, test in enumerate(suite["tests"]):
        try:
            exec(compile(test, f"<test {i + 1}>", "exec"), namespace)
        except _ProgramFailure as err:
            results[i] = {"passed": False, "kind": err.kind, "detail": str(err)[:300]}
        except AssertionError as err:
            results[i] = {"passed": False, "kind": "wrong_answer", "detail": _describe(err)}
        except Exception as err:
            kind = "runtime_error" if getattr(err, "_from_program", False) else "wrong_answer"
            results[i] = {"passed": False, "kind": kind, "detail": _describe(err)}
        else:
            results[i] = {"passed": True, "kind": None, "detail": ""}
        if runner.dead is not None and results[i]["passed"]:
            # A test that swallowed the failure (a bare except) still fails: the program is gone.
            results[i] = {"passed": False, "kind": runner.dead[0], "detail": runner.dead[1]}
    return results


# --- isolation set-up (tester, before the fork) --------------------------------------------------


def _read_header():
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte:
            raise EOFError("no job header on stdin")
        line += byte
    return json.loads(line)


_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 32, 4096
_MNT_DETACH = 2
# pivot_root(2) has no libc wrapper; where its number is not known, the root is moved instead.
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}


def _private_root(job):
    """Make a root that holds only the interpreter's files and a private ``/tmp``, and enter it.

    ``job["root_plan"]`` lists the host's Python installation (its standard library, the
    executable and the shared libraries they load) as directories to create, symlinks to copy
    and paths to bind-mount read-only; ``site-packages`` is hidden under an empty tmpfs. The
    program sees nothing else: no task data, no project, no ``/etc``, ``/proc``, ``/dev``, no
    host ``/tmp`` or ``/run`` (so no unix socket of the host). ``/tmp`` is a fresh size-capped
    tmpfs, the working directory and the only writable place.
    """
    import ctypes
    import platform

    libc = ctypes.CDLL(None, use_errno=True)

    def mount(source, target, fstype, flags, data=None):
        if libc.mount(source, target.encode(), fstype, flags, data) != 0:
            raise OSError(ctypes.get_errno(), f"mount of {target} failed")

    locked = _MS_NOSUID | _MS_NODEV
    root = job["root"]
    os.umask(0o022)
    mount(b"tmpfs", root, b"tmpfs", locked, b"size=1m,mode=0755")
    for kind, path, *rest in job["root_plan"]:
        inside = root + path
        if kind == "dir":
            os.makedirs(inside, exist_ok=True)
        elif kind == "link":
            if not os.path.lexists(inside):
                os.symlink(rest[0], inside)
        elif kind == "bind":
            if not os.path.lexists(inside):
                if os.path.isdir(path):
                    os.mkdir(inside)
                else:
                    os.close(os.open(inside, os.O_CREAT | os.O_WRONLY, 0o644))
            mount(path.encode(), inside, None, _MS_BIND)
            mount(None, inside, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | locked)
        elif kind == "hide":
            mount(b"tmpfs", inside, b"tmpfs", _MS_RDONLY | locked, b"size=4k,mode=0555")
    tmp = root + "/tmp"
    os.makedirs(tmp, exist_ok=True)
    mount(b"tmpfs", tmp, b"tmpfs", locked, f"size={job['tmpfs_bytes']},mode=0700".encode())
    if job.get("uid") is not None:
        os.chown(tmp, job["uid"], job["uid"])
    mount(None, root, None, _MS_REMOUNT | _MS_RDONLY | locked)
    old = os.open("/", os.O_DIRECTORY | os.O_RDONLY)
    os.chdir(root)
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is not None and libc.syscall(number, b".", b".") == 0:
        # The old root now lies over the new one; detach it, so no path leads back to the host.
        os.fchdir(old)
        if libc.umount2(b".", _MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), "could not detach the host's root")
    else:  # e.g. a root that cannot be pivoted (an initramfs): move the new root over it
        mount(b".", "/", None, 8192)  # MS_MOVE
        os.chroot(".")
    os.close(old)
    os.chdir("/tmp")
    job["workdir"] = "/tmp"


def _memory_cgroup(job):
    """Open the run's memory cgroup: ``(procs_fd, events_fd)``, or ``(None, None)`` without one."""
    cgroup = job.get("cgroup")
    if not cgroup:
        return None, None
    procs = os.open(os.path.join(cgroup["path"], "cgroup.procs"), os.O_WRONLY)
    events = os.open(os.path.join(cgroup["path"], cgroup["events"]), os.O_RDONLY)
    return procs, events


def _oom_kills(events_fd):
    """How many processes the kernel killed for the cgroup's memory limit (0 without one)."""
    if events_fd is None:
        return 0
    try:
        text = os.pread(events_fd, 4096, 0).decode()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


class _MemoryWatch:
    """Per-tree memory accounting where no cgroup is available (namespaces only): a thread of the
    tester, PID 1 of the run's namespace, sums the resident memory of every other process in it
    every 20 ms and kills them all once the sum passes the limit."""

    def __init__(self, proc_fd, limit):
        import threading

        self.proc_fd, self.limit, self.tripped = proc_fd, limit, False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _resident(self):
        page = os.sysconf("SC_PAGE_SIZE")
        total = 0
        for name in os.listdir(self.proc_fd):
            if not name.isdigit() or name == "1":
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                fd = os.open(f"{name}/statm", os.O_RDONLY, dir_fd=self.proc_fd)
                try:
                    total += int(os.read(fd, 256).split()[1]) * page
                finally:
                    os.close(fd)
        return total

    def _watch(self):
        while not self.stop.wait(0.02):
            if self._resident() > self.limit:
                self.tripped = True
                # From the namespace's init, -1 reaches every other process of the run.
                with contextlib.suppress(OSError):
                    os.kill(-1, signal.SIGKILL)
                return


def main():
    out = os.dup(1)
    job = _read_header()
    program = _read_exact(0, job["program_bytes"]).decode("utf-8", "surrogatepass")
    null = os.open(os.devnull, os.O_RDWR)  # opened before the private root, which has no /dev
    cgroup_fd, events_fd = _memory_cgroup(job)
    proc_fd = None
    if job.get("account_bytes"):  # the namespace's own /proc, kept open past the private root
        proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    if job["isolation"] == "namespaces":
        _private_root(job)
    call_r, call_w = os.pipe()
    reply_r, reply_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(call_w)
            os.close(reply_r)
            os.close(out)
            for fd in (events_fd, proc_fd):
                if fd is not None:
                    os.close(fd)
            _runner(job, program, call_r, reply_w, null, cgroup_fd)
        finally:
            os._exit(0)
    os.close(call_r)
    os.close(reply_w)
    if cgroup_fd is not None:
        os.close(cgroup_fd)
    del program
    deadline = time.monotonic() + job["wall_seconds"]
    # Read only now: the runner was forked without the tests or the nonce in its memory.
    rest = json.loads(sys.stdin.buffer.read())
    sys.stdout = sys.stderr = os.fdopen(null, "w")
    watch = None if proc_fd is None else _MemoryWatch(proc_fd, job["account_bytes"])
    runner = _Runner(pid, call_w, reply_r, deadline, job["message_bytes"], job["cpu_seconds"])
    results = _run_tests(runner, rest)
    if watch is not None:
        watch.stop.set()
    if runner.dead is None:
        runner.finish(("exited", ""))
    if _oom_kills(events_fd) or (watch is not None and watch.tripped):
        # A process of the tree was killed for the run's memory limit: whatever failed after
        # that failed for memory.
        limit = job["memory_bytes"] >> 20
        for r in results:
            if not r["passed"]:
                r["kind"] = "memory"
                r["detail"] = f"the program's processes used more than {limit} MiB together"
    if job.get("uid") is not None and job["isolation"] != "namespaces":
        _kill_uid(job["uid"])
    report = json.dumps({"nonce": rest["nonce"], "results": results}) + "\n"
    data = report.encode()
    while data:
        data = data[os.write(out, data) :]
    os._exit(0)  # nothing left to clean up; skipping interpreter shutdown saves a few ms


def _kill_uid(uid):
    """Kill every process of the runner's uid (children that left the process group included)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
