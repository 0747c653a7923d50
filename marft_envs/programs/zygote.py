"""The zygote: a small Python process, started once, that forks each episode's program process.

Forking the trainer copies the page tables of everything it holds (the model, torch): about
20 ms per episode with the built-in model, more with a real one. The zygote is a fresh
interpreter that holds only what unpickling the program imports, so forking it is cheap; its
children run the program exactly as a child of the trainer would
(:func:`marft_envs.programs.child.child_main`).

The program, its task and the client's description travel pickled, so the zygote serves
programs it can import by name (a function of a module on the trainer's ``sys.path``, e.g. the
``team.py`` of ``marft train --env team:helpdesk-v0``). Anything else (a closure, a function of
``__main__``, a task that does not pickle) gets ``None`` from :func:`start_in_zygote`, and the
caller forks the trainer instead.

Protocol, over a socket pair made by the trainer (no address anyone else could connect to): per
episode the trainer sends the pickled episode, with one end of a new socket pair attached
(``SCM_RIGHTS``); the zygote forks a child that keeps that end as its connection to the trainer,
and answers ``("ok", pid)``, or ``("error", message)`` when it cannot load the episode. The
zygote reaps its children, and ends when the trainer's end of the control socket closes.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from marft_envs.programs.child import child_main
from marft_envs.programs.client import loopback_http_client

__all__ = ["Zygote", "start_in_zygote"]

_HEADER = struct.Struct("!Q")
#: Seconds the trainer waits for each answer of the zygote.
_TIMEOUT = 60.0


def _send(sock: socket.socket, payload: bytes, fd: int | None = None) -> None:
    header = _HEADER.pack(len(payload))
    if fd is None:
        sock.sendall(header)
    else:
        socket.send_fds(sock, [header], [fd])
    sock.sendall(payload)


def _receive(sock: socket.socket, with_fd: bool = False) -> tuple[bytes, int | None] | None:
    """One framed message (and the descriptor sent with it); None at the end of the stream."""
    fd = None
    if with_fd:
        head, fds, _, _ = socket.recv_fds(sock, _HEADER.size, 1)
        fd = fds[0] if fds else None
    else:
        head = sock.recv(_HEADER.size)
    if not head:
        return None
    head += _exactly(sock, _HEADER.size - len(head))
    (size,) = _HEADER.unpack(head)
    return _exactly(sock, size), fd


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("the zygote's peer closed the control socket")
        data.extend(chunk)
    return bytes(data)


class Zygote:
    """The trainer's side of the zygote process (one per trainer process, started on first use)."""

    def __init__(self) -> None:
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._control.settimeout(_TIMEOUT)
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "marft_envs.programs.zygote", str(theirs.fileno())],
            stdin=subprocess.PIPE,
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        assert self._process.stdin is not None
        self._process.stdin.write(pickle.dumps(list(sys.path)))
        self._process.stdin.close()

    def start(self, payload: bytes) -> tuple[int, Connection] | None:
        """Fork a child for one pickled episode: its pid and its connection (None: the zygote
        cannot load the episode)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            try:
                _send(self._control, payload, theirs.fileno())
                theirs.close()
                answer = _receive(self._control)
            except (OSError, EOFError):
                answer = None
        if answer is None:
            ours.close()
            raise RuntimeError(
                "the program zygote stopped answering; isolation='process' forks the trainer "
                "for the next episodes."
            )
        kind, value = pickle.loads(answer[0])
        if kind != "ok":
            ours.close()
            return None
        return int(value), Connection(ours.detach())

    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        """Stop the zygote (running children are ended by their episodes)."""
        self._control.close()
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()
#: Programs the zygote could not import, and a zygote that failed: the trainer forks instead.
_UNLOADABLE: set[str] = set()


def _zygote() -> Zygote:
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or not _ZYGOTE.alive():
            _ZYGOTE = Zygote()
        return _ZYGOTE


def _stop_zygote() -> None:
    if _ZYGOTE is not None:
        _ZYGOTE.close()


atexit.register(_stop_zygote)


def start_in_zygote(
    program: Callable[..., Any], task: Any, spec: tuple[Any, ...]
) -> tuple[int, Connection] | None:
    """Start one episode's program process from the zygote: ``(pid, connection)``, or None when
    the episode does not pickle or the zygote cannot import the program (fork the trainer)."""
    name = f"{getattr(program, '__module__', '')}.{getattr(program, '__qualname__', '')}"
    if name in _UNLOADABLE or "<zygote>" in _UNLOADABLE:
        return None
    try:
        payload = pickle.dumps((program, task, spec))
    except Exception:  # a closure, a lambda, a task that does not pickle
        return None
    try:
        started = _zygote().start(payload)
    except RuntimeError:
        _UNLOADABLE.add("<zygote>")
        return None
    if started is None:
        _UNLOADABLE.add(name)
    return started


# ---------------------------------------------------------------------- the zygote process
_WARM: list[Any] = []


def _warm_openai() -> None:
    """Import, once here rather than in every child, what the ``openai`` client loads lazily on
    its first call (the chat resources and their response types)."""
    if _WARM:
        return
    import openai
    from openai.types.chat import ChatCompletion  # noqa: F401

    client = openai.OpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="warm",
        http_client=loopback_http_client(),
    )
    _WARM.append(client.chat.completions)
    _WARM.append(client.models)


def _serve(control: socket.socket) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped as they end
    while True:
        try:
            message = _receive(control, with_fd=True)
        except (OSError, EOFError):
            return
        if message is None:
            return  # the trainer closed its end, or ended
        payload, fd = message
        try:
            program, task, spec = pickle.loads(payload)
        except Exception as err:
            if fd is not None:
                os.close(fd)
            _send(control, pickle.dumps(("error", f"{type(err).__name__}: {err}")))
            continue
        assert fd is not None
        if spec[0] == "http":
            _warm_openai()
        pid = os.fork()
        if pid == 0:
            control.close()
            child_main(program, task, spec, Connection(fd))  # never returns
        os.close(fd)
        _send(control, pickle.dumps(("ok", pid)))


if __name__ == "__main__":
    sys.path[:] = pickle.loads(sys.stdin.buffer.read())
    _serve(socket.socket(fileno=int(sys.argv[1])))
