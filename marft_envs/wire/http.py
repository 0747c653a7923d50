"""The HTTP side of the OpenAI wire format, shared by the training endpoint
(:mod:`marft_envs.programs.server`) and ``marft serve`` (:mod:`marft_algos.serving`): errors in
the OpenAI error shape, the loopback ``Host`` check, and a JSON body read within its bound.

Starlette is imported only when a response is built (the ``agents`` extra).
"""

from __future__ import annotations

import json
from typing import Any

from marft_envs.wire.protocol import RequestRefused

__all__ = ["allowed_host", "error_response", "read_json"]


def error_response(status: int, message: str, kind: str, code: str | None = None) -> Any:
    """An error as the OpenAI API writes it (``openai`` raises the matching ``APIStatusError``)."""
    from starlette.responses import JSONResponse

    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code, "param": None}},
        status_code=status,
    )


def allowed_host(host: str | None, port: int) -> bool:
    """``Host`` names this machine's loopback (``127.0.0.1``, ``localhost``, ``[::1]``) and,
    when it has one, this port: a browser page on another origin cannot send that (DNS rebinding
    included, whose requests carry the attacker's host name)."""
    if not host:
        return False
    name, _, given = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name:  # no port given
        name, given = host, ""
    return name.lower() in ("127.0.0.1", "localhost", "[::1]") and given in ("", str(port))


async def read_json(request: Any, max_bytes: int) -> Any:
    """The request's JSON body, read no further than ``max_bytes``.

    Raises:
        RequestRefused: Another content type than JSON (415), a body over ``max_bytes`` (413),
            malformed JSON (400).
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise RequestRefused(
            f"the request's content type is {kind or 'missing'!r}; send application/json (as every "
            f"OpenAI client does).",
            status=415,
            code="unsupported_media_type",
        )
    too_large = RequestRefused(
        f"the request body is over max_request_bytes={max_bytes}; send less, or raise "
        f"max_request_bytes where the program is registered.",
        status=413,
        code="request_too_large",
        kind="RequestTooLarge",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > max_bytes:
            raise too_large
    try:
        return json.loads(body)
    except ValueError:
        raise RequestRefused("the request body is not JSON.", status=400) from None
