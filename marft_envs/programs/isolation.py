"""``isolation="process"``: an agent program's episode in a process of its own.

The process is forked from the zygote (:mod:`marft_envs.programs.zygote`) when the program can
be imported there, otherwise from the trainer itself (no pickling, no import: closures work).
Either way it leads a new process group. Its model calls travel to this process over a socket
(in process) or go to the episode's URL of the local endpoint as before (``transport="http"``);
what it returns or raises comes back over the socket. When the episode ends, the whole process
group is killed, so a process the program started ends with it (unless it left the group on
purpose with ``setsid``). ``os._exit``, a crash of the interpreter or a kill of the process end
its episode only: the episode fails with ``ProgramExited`` and the trainer goes on.

POSIX only (``os.fork``). The cost is measured in ``benchmarks/programs/scale.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing import Pipe
from typing import Any

from marft_envs.programs.child import child_main, client_spec
from marft_envs.programs.client import CallRecord, Counts, EpisodeEnded, ProgramClient
from marft_envs.programs.events import Event
from marft_envs.programs.zygote import start_in_zygote
from marft_envs.wire.protocol import Reply, RequestRefused

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
        spec = client_spec(run.client)
        started = start_in_zygote(program, task, spec)
        if started is not None:
            self.pid, self._conn = started
        else:  # a program the zygote cannot import (a closure, __main__): fork the trainer
            parent, child = Pipe(duplex=True)
            self.pid = os.fork()
            if self.pid == 0:  # the child: never returns into the trainer's code
                parent.close()
                child_main(program, task, spec, child)
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
        except ChildProcessError:  # the zygote's child: the zygote reaps it
            return "its exit status is the zygote's to read"
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit code {os.waitstatus_to_exitcode(status)}"

    def kill(self) -> None:
        """End the program and every process of its group (the episode is over)."""
        self._ended = True
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # not yet the leader of its group (or gone): the process alone
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)
        except PermissionError:
            pass
        # The relay closes the pipe when it reads the end of it: closing it here would free its
        # descriptor for the next episode's pipe while the relay may still read from it.


def _named_error(name: str, message: str) -> BaseException:
    """An exception whose type name is the child's (its class may not exist here)."""
    return type(name, (RuntimeError,), {"__module__": "program"})(message)
