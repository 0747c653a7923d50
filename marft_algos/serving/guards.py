"""Request guards of the serving endpoint: API key, Host header, content type, size bounds.

The Host, content-type and body checks are the OpenAI wire surface's, which the training endpoint
uses too (:func:`~marft_envs.wire.http.allowed_host`, :func:`~marft_envs.wire.http.read_json`,
and :func:`~marft_envs.wire.check_request`'s message count), under the same
:class:`~marft_envs.wire.RequestLimits`; this module adds the API key and words the refusals for
``marft serve``'s flags. Each check returns None when
the request may go on, or an OpenAI-style error response that says what was wrong and how to fix
it.
"""

from __future__ import annotations

import hmac
from typing import Any

from marft_envs.wire.http import allowed_host, error_response, read_json
from marft_envs.wire.protocol import RequestLimits, RequestRefused

__all__ = ["check_api_key", "check_host", "read_body", "refused"]


def check_api_key(request: Any, api_key: str | None) -> Any:
    """401 unless the request carries ``Authorization: Bearer <api_key>`` (no key: open)."""
    if api_key is None:
        return None
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode()):
        return None
    return error_response(
        401,
        "missing or wrong API key: send 'Authorization: Bearer <key>' with the key the server was "
        "started with (--api-key or MARFT_API_KEY), e.g. openai.OpenAI(api_key=...).",
        "invalid_request_error",
        "invalid_api_key",
    )


def check_host(request: Any, loopback: bool) -> Any:
    """On a loopback-bound server, 421 for a ``Host`` that is not a loopback name with this port
    (a web page reaching the server through DNS rebinding); a server bound elsewhere relies on its
    API key."""
    if not loopback:
        return None
    host = request.headers.get("host")
    port = int((request.scope.get("server") or ("", 0))[1] or 0)
    if allowed_host(host, port):
        return None
    return error_response(
        421,
        f"Host {host!r} is not this server's: a server bound to a loopback address answers only "
        f"to 127.0.0.1, localhost or [::1] on its port.",
        "invalid_request_error",
    )


async def read_body(request: Any, limits: RequestLimits) -> tuple[Any, Any]:
    """The request body as a JSON object, read at most ``limits.max_request_bytes`` far.

    Returns:
        ``(body, None)``, or ``(None, error response)``: 415 for another content type than JSON,
        413 for a body over the limit, 400 for one that is not a JSON object.
    """
    try:
        body = await read_json(request, limits.max_request_bytes)
    except RequestRefused as err:
        return None, refused(err, limits)
    if not isinstance(body, dict):
        return None, error_response(
            400, "the request body must be a JSON object", "invalid_request_error"
        )
    return body, None


def refused(err: RequestRefused, limits: RequestLimits) -> Any:
    """The response to a refused request, naming the server's flag for a bound it passed."""
    message = str(err)
    if err.code == "request_too_large":
        message = (
            f"the request body is over the server's limit of {limits.max_request_bytes} bytes; send "
            f"fewer or shorter messages, or start marft serve with a larger --max-body-bytes."
        )
    elif err.code == "too_many_messages":
        message = (
            f"the request has more messages than the server's limit of {limits.max_messages}; "
            f"shorten the history, or start marft serve with a larger --max-messages."
        )
    return error_response(err.status, message, err.error_type, err.code)
