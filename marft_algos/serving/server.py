"""Running the serving app: in the foreground until Ctrl-C / SIGTERM, or on a background thread.

Both bind where they are told (127.0.0.1 unless asked otherwise) and generate through one
:class:`~marft_algos.serving.batcher.Batcher`. One signal (or :meth:`BackgroundServer.stop`)
stops the server within about ``shutdown_timeout`` seconds, even mid-generation: it stops
accepting, answers the calls still queued with 503 at once, gives the batch in progress
``shutdown_timeout`` seconds to finish, then stops it at its next token
(:mod:`marft_algos.policy.stopping`) and answers its calls with 503 too, and returns.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from marft_algos.runs.tracing import EpisodeTracer, NoTracer
from marft_algos.serving.app import build_app
from marft_algos.serving.batcher import Batcher
from marft_algos.serving.team import ServedTeam
from marft_envs.wire.protocol import RequestLimits

__all__ = ["BackgroundServer", "BindError", "base_url", "bind", "is_loopback", "serve"]

logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BindError(OSError):
    """The address cannot be listened on (in use, or not an address of this machine)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as err:
        raise BindError(
            f"cannot listen on {host}:{port} ({err.strerror}); pick another --port or --host."
        ) from None


def base_url(host: str, port: int) -> str:
    """``http://<host>:<port>/v1``."""
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


#: Seconds a stop waits for the batch in progress before its calls are answered 503.
SHUTDOWN_TIMEOUT = 3.0


def _server(
    team: ServedTeam,
    host: str,
    port: int,
    api_key: str | None,
    limits: RequestLimits | None,
    max_batch: int,
    shutdown_timeout: float = SHUTDOWN_TIMEOUT,
    tracer: EpisodeTracer | NoTracer | None = None,
) -> tuple[Any, Batcher]:
    try:
        import uvicorn
    except ImportError as err:
        raise ImportError(
            f"marft serve needs the server packages ({err.name} is missing): "
            f"pip install 'marft[agents]'."
        ) from None
    policy = team.policy
    batcher = Batcher(lambda agent, ids, s: policy.generate_from_ids(agent, ids, s), max_batch)
    loopback = is_loopback(host)
    app = build_app(team, batcher, api_key=api_key, limits=limits, loopback=loopback, tracer=tracer)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        # A backstop: the batcher answers every call within shutdown_timeout of the stop.
        timeout_graceful_shutdown=int(shutdown_timeout) + 5,
    )

    class Server(uvicorn.Server):  # type: ignore[misc]
        def handle_exit(self, sig: int, frame: Any) -> None:
            # Answer the calls in flight off the signal handler; uvicorn then stops accepting
            # and waits for their responses.
            if not self.should_exit:
                threading.Thread(
                    target=batcher.close, args=(shutdown_timeout,), name="marft-serve-stop"
                ).start()
            super().handle_exit(sig, frame)

    return Server(config), batcher


def serve(
    team: ServedTeam,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    limits: RequestLimits | None = None,
    max_batch: int = 8,
    announce: Callable[[str], None] | None = None,
    shutdown_timeout: float = SHUTDOWN_TIMEOUT,
    tracer: EpisodeTracer | NoTracer | None = None,
) -> bool:
    """Serve ``team`` in the foreground until Ctrl-C or SIGTERM, then stop within about
    ``shutdown_timeout`` seconds (see the module notes).

    Args:
        announce: Called with the base URL once the port is bound (port 0: the port it got).
        shutdown_timeout: Seconds a stop waits for the batch in progress.
        tracer: Records every call as a span (docs/tracing.md, "Served calls"); the caller
            closes it.

    Returns:
        Whether a generation was still running when serving stopped (its calls were answered).
        A process that then exits should leave with ``os._exit``: the interpreter's finalisation
        would tear down the generating thread inside torch, which aborts the process.
    """
    listener = bind(host, port)
    try:
        server, batcher = _server(
            team, host, port, api_key, limits, max_batch, shutdown_timeout, tracer
        )
    except BaseException:
        listener.close()
        raise
    try:
        if announce is not None:
            announce(base_url(host, int(listener.getsockname()[1])))
        with _signals_end_serving(), contextlib.suppress(_Stopped):
            server.run(sockets=[listener])
    finally:
        batcher.close(shutdown_timeout)
        listener.close()
    logger.info("stopped serving %s", team.source)
    return batcher.generating()


class _Stopped(Exception):
    """Ctrl-C or SIGTERM arrived: uvicorn shut down gracefully and passed the signal on."""


@contextlib.contextmanager
def _signals_end_serving() -> Iterator[None]:
    """Make Ctrl-C and SIGTERM end :func:`serve` normally.

    uvicorn catches both while it runs, shuts down gracefully, then raises the signal again for
    the handlers that were there before; these handlers turn it into a normal return.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(sig: int, frame: Any) -> None:
        raise _Stopped

    saved = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


class BackgroundServer:
    """The app on a daemon thread, for tests and for embedding in a process that has its own
    main loop. Use as a context manager (it stops on every exit path) or call :meth:`stop`.

    Attributes:
        url: ``http://<host>:<port>/v1``, the ``base_url`` of an ``openai`` client.
        batcher: The batcher (its ``batches`` count shows how calls were grouped).
    """

    def __init__(
        self,
        team: ServedTeam,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        limits: RequestLimits | None = None,
        max_batch: int = 8,
        start_timeout: float = 30.0,
        shutdown_timeout: float = SHUTDOWN_TIMEOUT,
        tracer: EpisodeTracer | NoTracer | None = None,
    ) -> None:
        self.shutdown_timeout = shutdown_timeout
        self._server, self.batcher = _server(
            team, host, port, api_key, limits, max_batch, shutdown_timeout, tracer
        )
        self._thread = threading.Thread(target=self._server.run, name="marft-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + start_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the serving endpoint did not start on {host}:{port}.")
            time.sleep(0.01)
        bound = self._server.servers[0].sockets[0].getsockname()
        self.port = int(bound[1])
        self.url = base_url(host, self.port)

    @property
    def running(self) -> bool:
        """Whether the server thread is alive."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting, answer the requests in flight (within ``shutdown_timeout``), end the
        thread and the batcher."""
        self._server.should_exit = True
        self.batcher.close(self.shutdown_timeout)
        self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
