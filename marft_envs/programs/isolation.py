"""``isolation="process"``: an agent program's episode in a child process of its own.

The child is forked when the episode starts, so the program needs no pickling and no import, and
it is the leader of a new process group. Its model calls travel to this process over a pipe (in
process) or go to the episode's URL of the local endpoint as before (``transport="http"``); what it
returns or raises comes back over the pipe. When the episode ends, the whole process group is
killed, so a process the program started ends with it (unless it left the group on purpose with
``setsid``). ``os._exit``, a crash of the interpreter or a kill of the child end its episode only:
the episode fails with ``ProgramExited`` and the trainer goes on.

POSIX only (``os.fork``). Forking copies the trainer's address space lazily (copy-on-write), so
the cost is the page tables, measured in docs/programs.md.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import queue
import signal
import threading
import traceback
from collections.abc import Callable
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

from marft_envs.programs.client import (
    CallRecord,
    Counts,
    EpisodeEnded,
    ProgramClient,
    Reply,
    RequestRefused,
)
from marft_envs.programs.events import Event, run_program

__all__ = ["ChildProgram", "ProgramExited"]


class ProgramExited(RuntimeError):
    """The program's process ended without returning (``os._exit``, a crash, a signal)."""


class ChildProgram:
    """The program of one :class:`~marft_envs.programs.runner.ProgramRun` (``run``: its
    ``client``, ``submit``, ``refused`` and ``ended``), in a forked child."""

    def __init__(self, program: Callable[..., Any], task: Any, run: Any) -> None:
        if not hasattr(os, "fork"):
            raise RuntimeError(
                "isolation='process' needs os.fork (Linux or macOS); use isolation='thread'."
            )
        self._run = run
        self._in_process = isinstance(run.client, ProgramClient)
        self._send_lock = threading.Lock()
        self._ended = False
        parent, child = Pipe(duplex=True)
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into the trainer's code
            parent.close()
            _child_main(program, task, run.client, child, self._in_process)
        child.close()
        self._conn = parent
        threading.Thread(target=self._relay, name="marft-program-relay", daemon=True).start()

    # ------------------------------------------------------------------ trainer side
    def _relay(self) -> None:
        """Serve the child's calls and count requests until it ends; report how it ended."""
        ended = False
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "call":
                self._call(message[1], message[2])
            elif kind == "counts":
                counts: Counts = self._run.client.counts
                self._reply(
                    message[1], (counts.calls, counts.prompt_tokens, counts.completion_tokens)
                )
            elif kind == "refused":
                self._run.refused(message[1], message[2])
            elif kind == "return":
                ended = True
                self._run.ended(Event("return", value=message[1]))
            elif kind == "error":
                ended = True
                error = _named_error(message[1], message[2])
                self._run.ended(Event("error", error=error, traceback=message[3]))
        self._conn.close()
        status = self._reap()
        if not ended and not self._ended:
            self._run.ended(
                Event(
                    "error",
                    error=ProgramExited(
                        f"the program's process ended without returning ({status}); with "
                        f"isolation='process' only its episode fails."
                    ),
                )
            )

    def _call(self, request: int, call: CallRecord) -> None:
        def deliver(answer: Any) -> None:
            if self._in_process and isinstance(answer, Reply):
                self._run.client.counts.add(
                    call.agent, answer.prompt_tokens, answer.completion_tokens
                )
            self._reply(request, answer)

        try:
            self._run.submit(call, deliver)
        except (EpisodeEnded, RequestRefused) as err:
            self._reply(request, err)

    def _reply(self, request: int, answer: Any) -> None:
        with self._send_lock, contextlib.suppress(OSError, ValueError):  # the child may be gone
            self._conn.send(("reply", request, answer))

    def _reap(self) -> str:
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            return "already reaped"
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit code {os.waitstatus_to_exitcode(status)}"

    def kill(self) -> None:
        """End the program and every process of its group (the episode is over)."""
        self._ended = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        # The relay closes the pipe when it reads the end of it: closing it here would free its
        # descriptor for the next episode's pipe while the relay may still read from it.


def _named_error(name: str, message: str) -> BaseException:
    """An exception whose type name is the child's (its class may not exist here)."""
    return type(name, (RuntimeError,), {"__module__": "program"})(message)


# ---------------------------------------------------------------------- child side
def _child_main(
    program: Callable[..., Any], task: Any, client: Any, conn: Connection, in_process: bool
) -> None:
    status = 0
    try:
        # The inherited heap is the trainer's: never walk it (each visit copies a page).
        gc.freeze()
        os.setsid()
        link = _Link(conn)
        if in_process:
            client._send, client._refused = link.call, link.refused
        else:
            client = _http_client(client, link)
        try:
            result: tuple[Any, ...] = ("return", run_program(program, task, client))
        except BaseException as exc:
            result = ("error", type(exc).__name__, str(exc), traceback.format_exc())
        try:
            link.send(result)
        except Exception as err:  # e.g. a return value that cannot be pickled
            link.send(
                (
                    "error",
                    type(err).__name__,
                    f"the program's result could not be sent to the trainer: {err}",
                    traceback.format_exc(),
                )
            )
    except BaseException:
        status = 1
    finally:
        os._exit(status)


class _Link:
    """The child's end of the pipe: calls wait for their replies, matched by request number."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._requests = itertools.count()
        self._waiting: dict[int, queue.Queue[Any]] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self._conn.send(message)

    def _ask(self, kind: str, *payload: Any) -> Any:
        box: queue.Queue[Any] = queue.Queue(maxsize=1)
        request = next(self._requests)
        self._waiting[request] = box
        self.send((kind, request, *payload))
        answer = box.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _read(self) -> None:
        while True:
            try:
                _, request, answer = self._conn.recv()
            except (EOFError, OSError):
                os._exit(0)  # the trainer closed the episode
            self._waiting.pop(request).put(answer)

    def call(self, call: CallRecord) -> Reply:
        answer: Reply = self._ask("call", call)
        return answer

    def refused(self, kind: str, message: str) -> None:
        self.send(("refused", kind, message))

    def counts(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        answer: tuple[dict[str, int], dict[str, int], dict[str, int]] = self._ask("counts")
        return answer


class _RemoteCounts:
    """``client.counts`` in the child of an HTTP episode: the endpoint's counts, asked for."""

    def __init__(self, link: _Link) -> None:
        self._link = link

    @property
    def calls(self) -> dict[str, int]:
        return self._link.counts()[0]

    @property
    def prompt_tokens(self) -> dict[str, int]:
        return self._link.counts()[1]

    @property
    def completion_tokens(self) -> dict[str, int]:
        return self._link.counts()[2]


def _http_client(parent_client: Any, link: _Link) -> Any:
    """A fresh ``openai.OpenAI`` on the episode's URL (the parent's connection pool stays there)."""
    import openai

    client = openai.OpenAI(
        base_url=str(parent_client.base_url),
        api_key=parent_client.api_key,
        max_retries=0,
        timeout=None,
        http_client=openai.DefaultHttpxClient(timeout=None, verify=False),  # loopback: no TLS
    )
    client.rng, client.agents = parent_client.rng, parent_client.agents  # type: ignore[attr-defined]
    client.counts = _RemoteCounts(link)  # type: ignore[attr-defined]
    return client
