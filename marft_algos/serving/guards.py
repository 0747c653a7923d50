"""Request guards of the serving endpoint: API key, Host header, content type, size bounds.

Small local checks (``marft_envs.programs.server`` had none to share when this was written). Each
returns None when the request may go on, or an OpenAI-style error response that says what was
wrong and how to fix it.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Limits", "check_api_key", "check_content_type", "check_host", "error", "read_json"]

#: Host names a loopback-bound server answers to (anything else: DNS rebinding from a web page).
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True)
class Limits:
    """Bounds on one request.

    Attributes:
        max_body_bytes: Largest request body (413 beyond).
        max_messages: Most messages in one call (400 beyond).
    """

    max_body_bytes: int = 4 * 1024 * 1024
    max_messages: int = 512

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")


def error(status: int, message: str, kind: str, code: str | None = None) -> Any:
    """An error response shaped as the OpenAI API writes them (``openai`` raises it by status)."""
    from starlette.responses import JSONResponse

    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code, "param": None}},
        status_code=status,
    )


def check_api_key(request: Any, api_key: str | None) -> Any:
    """401 unless the request carries ``Authorization: Bearer <api_key>`` (no key: open)."""
    if api_key is None:
        return None
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode()):
        return None
    return error(
        401,
        "missing or wrong API key: send 'Authorization: Bearer <key>' with the key the server was "
        "started with (--api-key or MARFT_API_KEY), e.g. openai.OpenAI(api_key=...).",
        "invalid_request_error",
        "invalid_api_key",
    )


def check_host(request: Any, loopback: bool) -> Any:
    """On a loopback-bound server, 421 for a ``Host`` that is not a loopback name (a web page
    reaching the server through DNS rebinding); a server bound elsewhere relies on its API key."""
    if not loopback:
        return None
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if host.count(":") <= 1 else host.rsplit("]", 1)[0] + "]"
    if name.lower() in LOOPBACK_NAMES:
        return None
    return error(
        421,
        f"Host {host!r} is not this server's: a server bound to a loopback address answers only "
        f"to 127.0.0.1, localhost or [::1].",
        "invalid_request_error",
    )


def check_content_type(request: Any) -> Any:
    """415 unless the body is declared JSON (a browser form cannot post it without a preflight)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        return None
    return error(
        415,
        f"Content-Type {kind or 'missing'!r}: send the request as 'application/json'.",
        "invalid_request_error",
    )


async def read_json(request: Any, limits: Limits) -> tuple[Any, Any]:
    """The request body as JSON, read at most ``max_body_bytes`` far.

    Returns:
        ``(body, None)``, or ``(None, error response)``: 413 for a body over the limit, 400 for
        one that is not a JSON object.
    """
    too_large = error(
        413,
        f"the request body is over the server's limit of {limits.max_body_bytes} bytes; send "
        f"fewer or shorter messages, or start the server with a larger --max-body-bytes.",
        "invalid_request_error",
        "request_too_large",
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        return None, too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_body_bytes:
            return None, too_large
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks))
    except ValueError:
        return None, error(400, "the request body is not JSON", "invalid_request_error")
    if not isinstance(body, dict):
        return None, error(400, "the request body must be a JSON object", "invalid_request_error")
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > limits.max_messages:
        return None, error(
            400,
            f"{len(messages)} messages is over the server's limit of {limits.max_messages}; "
            f"shorten the history, or start the server with a larger --max-messages.",
            "invalid_request_error",
            "too_many_messages",
        )
    return body, None
