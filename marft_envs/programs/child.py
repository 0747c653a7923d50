"""The program's side of ``isolation="process"``: a process that runs one episode of the program,
with a client whose calls travel to the trainer over a connection (in process) or go to the
episode's URL (HTTP), and sends back what the program returned or raised. It is forked either
from the trainer or from the zygote (:mod:`marft_envs.programs.zygote`)."""

from __future__ import annotations

import gc
import itertools
import os
import queue
import signal
import threading
import traceback
from collections.abc import Callable
from typing import Any

from marft_envs.programs.client import CallRecord, ProgramClient, loopback_http_client
from marft_envs.programs.events import run_program
from marft_envs.wire.protocol import Reply

__all__ = ["child_main", "client_spec"]


def client_spec(client: Any) -> tuple[Any, ...]:
    """What the child needs to build the program's client (picklable): the in-process client's
    agents, rng and limits, or the episode URL and key of an HTTP client."""
    if isinstance(client, ProgramClient):
        return ("inprocess", client.agents, client.rng, client._limits)
    return ("http", str(client.base_url), client.api_key, client.agents, client.rng)


def child_main(program: Callable[..., Any], task: Any, spec: tuple[Any, ...], conn: Any) -> None:
    """The program's process: run the episode, send what it returned or raised, exit."""
    status = 0
    try:
        # The inherited heap is the parent's: never walk it (each visit copies a page).
        gc.freeze()
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores it; the program waits
        link = _Link(conn)
        client = _client(spec, link)
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


def _client(spec: tuple[Any, ...], link: _Link) -> Any:
    if spec[0] == "inprocess":
        _, agents, rng, limits = spec
        return ProgramClient(agents, link.call, rng, limits, link.refused)
    return _http_client(spec, link)


class _Link:
    """The child's end of the pipe: calls wait for their replies, matched by request number."""

    def __init__(self, conn: Any) -> None:
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


def _http_client(spec: tuple[Any, ...], link: _Link) -> Any:
    """A fresh ``openai.OpenAI`` on the episode's URL (the trainer's connection pool stays there)."""
    import openai

    _, base_url, api_key, agents, rng = spec
    client = openai.OpenAI(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=None,
        http_client=loopback_http_client(),
    )
    client.rng, client.agents = rng, agents  # type: ignore[attr-defined]
    client.counts = _RemoteCounts(link)  # type: ignore[attr-defined]
    return client
