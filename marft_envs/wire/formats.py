"""Structured outputs: a chat request's ``response_format`` and a Responses request's
``text.format``, accepted in the OpenAI shape and not enforced.

OpenAI, and servers such as vLLM (its structured outputs), constrain decoding so that the reply
parses as the schema asked for. Marft does not: in training, the reply is what the policy sampled
from its own distribution, whose token log-probabilities the update uses, and a constrained
sampler would train on another distribution; ``marft serve`` gives each call the reply training
and ``marft eval`` saw, word for word. So a request may ask for ``text``, ``json_object`` or
``json_schema`` (the format is checked, and a Response repeats it as OpenAI's does), and the reply
is the text the policy generated, which may not parse. A program that parses it should catch the
failure: raised, it is a program error (counted, its episode dropped under ``on_error="drop"``);
caught, the program can pay a format reward part. Each process says so once per agent, in a
warning (:func:`check_output_format`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["FORMAT_TYPES", "check_output_format", "check_text_config"]

logger = logging.getLogger(__name__)

#: The output formats a request may name.
FORMAT_TYPES = ("text", "json_object", "json_schema")

#: Agents already told that their structured outputs are not enforced (one warning each).
_WARNED: set[str] = set()


def check_output_format(fmt: Any, where: str, agent: str | None = None) -> dict[str, Any]:
    """A requested output format, checked: ``{"type": "text" | "json_object" | "json_schema", ...}``.

    ``json_schema`` needs its ``schema`` as an object: in a chat ``response_format`` inside
    ``json_schema`` (``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``),
    in a Responses ``text.format`` beside ``type`` (``{"type": "json_schema", "name", "schema",
    "strict"}``). A format other than ``text`` is logged once per ``agent`` as not enforced.

    Args:
        fmt: The format as sent.
        where: Its place in the request, for the error (``response_format``, ``text.format``).
        agent: The agent asked (named in the warning).

    Returns:
        The format as a plain dict.

    Raises:
        TypeError: Not a format of the OpenAI shape; the message names the value and the shape.
    """
    if hasattr(fmt, "model_dump"):
        fmt = fmt.model_dump(exclude_none=True)
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind not in FORMAT_TYPES:
        raise TypeError(
            f"{where} must be {{'type': one of {list(FORMAT_TYPES)}, ...}}, got {fmt!r:.120}."
        )
    assert isinstance(fmt, Mapping)
    if kind == "json_schema":
        spec = fmt.get("json_schema") if where == "response_format" else fmt
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema", {}), Mapping):
            shape = (
                "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}"
                if where == "response_format"
                else "{'type': 'json_schema', 'name': ..., 'schema': {...}}"
            )
            raise TypeError(f"{where} must be {shape}, got {fmt!r:.120}.")
    if kind != "text":
        _warn_once(kind, agent)
    return dict(fmt)


def check_text_config(text: Any, agent: str | None = None) -> dict[str, Any] | None:
    """A Responses request's ``text`` (``{"format": {...}, "verbosity": ...}``), checked; None
    when the request has none."""
    if text is None:
        return None
    if hasattr(text, "model_dump"):
        text = text.model_dump(exclude_none=True)
    if not isinstance(text, Mapping):
        raise TypeError(f"text must be {{'format': {{'type': ...}}}}, got {text!r:.120}.")
    out = dict(text)
    if out.get("format") is not None:
        out["format"] = check_output_format(out["format"], "text.format", agent)
    return out


def _warn_once(kind: str, agent: str | None) -> None:
    key = str(agent)
    if key in _WARNED:
        return
    _WARNED.add(key)
    logger.warning(
        "Agent %r asked for a structured output (%s); marft does not constrain decoding to it, "
        "in training or in marft serve: the reply is the text the policy generated and may not "
        "parse. Parse it in the program and catch the failure (or pay a format reward part); "
        "see docs/programs.md, 'Structured outputs'. Said once per agent.",
        agent,
        kind,
    )
