"""What both endpoints answer besides calls: the model cards of ``GET /v1/models`` and
``GET /v1/models/<id>``, and every unknown route or method as a JSON error in the OpenAI error
shape (what an ``openai`` client raises as ``NotFoundError``), never a plain-text ``Not Found``.

``POST /v1/completions`` (the legacy text-completions API) is named as not served: marft renders
every prompt with the agent's chat template, so it speaks chat completions and responses only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marft_envs.wire.http import error_response

__all__ = ["ROUTES", "model_card", "model_list", "route_errors"]

#: The OpenAI routes both endpoints serve, under their base URL.
ROUTES = "POST /chat/completions, POST /responses, GET /models and GET /models/<agent>"


def model_card(agent: str) -> dict[str, Any]:
    """One agent as a ``Model`` object."""
    return {"id": agent, "object": "model", "created": 0, "owned_by": "marft"}


def model_list(agents: Sequence[str]) -> dict[str, Any]:
    """``GET /models``: the team's agents."""
    return {"object": "list", "data": [model_card(a) for a in agents]}


def _unknown_route(request: Any, exc: Any) -> Any:
    method, path = request.method, request.url.path
    if exc.status_code == 405:
        headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
        allowed = headers.get("allow", "")
        return error_response(
            405,
            f"{method} is not allowed on {path}; use {allowed or 'another method'}.",
            "invalid_request_error",
            "method_not_allowed",
        )
    if exc.status_code != 404:
        return error_response(exc.status_code, str(exc.detail), "invalid_request_error")
    if path.rstrip("/").endswith("/completions") and not path.rstrip("/").endswith(
        "/chat/completions"
    ):
        message = (
            f"Invalid URL ({method} {path}): the legacy completions API is not supported; marft "
            f"renders every prompt with the agent's chat template. Call POST .../chat/completions "
            f"or POST .../responses with the same base URL."
        )
    else:
        message = f"Invalid URL ({method} {path}): this endpoint serves {ROUTES}."
    return error_response(404, message, "invalid_request_error", "unknown_url")


def route_errors() -> dict[Any, Any]:
    """Starlette ``exception_handlers`` writing 404 (unknown route) and 405 (wrong method) in the
    OpenAI error shape."""

    async def handler(request: Any, exc: Any) -> Any:
        return _unknown_route(request, exc)

    return {404: handler, 405: handler}
