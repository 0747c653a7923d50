"""What the spans of :mod:`marft_algos.runs.tracing` say: the GenAI semantic conventions'
attributes of a model call and messages, and the ``marft.*`` attributes of an episode
(docs/tracing.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from marft_algos.rollout.episodes import Episode
from marft_algos.rollout.evaluation import episode_correct
from marft_algos.rollout.failures import failure_kind

__all__ = [
    "PROVIDER",
    "branch_id",
    "chat_attributes",
    "env_id_of",
    "episode_attributes",
    "finish_reason",
    "genai_messages",
    "output_message",
]

#: The ``gen_ai.provider.name`` of marft's own model calls.
PROVIDER = "marft"


def chat_attributes(
    agent: str, input_tokens: int, output_tokens: int, finished: bool
) -> dict[str, Any]:
    """The GenAI attributes of one model call of ``agent``."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": agent,
        "gen_ai.response.model": agent,
        "gen_ai.agent.name": agent,
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.response.finish_reasons": [finish_reason(finished)],
    }


def finish_reason(finished: bool) -> str:
    return "stop" if finished else "length"


def branch_id(branch: Sequence[int]) -> str:
    """A branch tree node as ``marft.branch.id``: its path, dot-separated (``"0.1.2"``)."""
    return ".".join(str(i) for i in branch)


def episode_attributes(episode: Episode, version: int, env_id: str | None) -> dict[str, Any]:
    kind = failure_kind(episode)
    attributes: dict[str, Any] = {
        "marft.policy_version": version,
        "marft.seed": int(episode.seed),
        "marft.reward": float(episode.team_return),
        "marft.correct": episode_correct(episode),
        "marft.failed": kind is not None,
        "marft.dropped": bool(episode.info.get("drop", False)),
        "marft.decisions": len(episode.decisions),
    }
    if env_id is not None:
        attributes["marft.env.id"] = env_id
    if kind is not None:
        attributes["marft.error.type"] = kind
    if episode.group is not None:
        attributes["marft.group"] = int(episode.group)
    if episode.branch is not None:
        attributes["marft.branch.id"] = branch_id(episode.branch)
    for agent, value in sorted(episode.agent_returns.items()):
        attributes[f"marft.reward.agent.{agent}"] = float(value)
    parts = episode.info.get("reward_parts")
    if isinstance(parts, Mapping):
        for name, value in parts.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[f"marft.reward.{name}"] = float(value)
    return attributes


def genai_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages in the GenAI conventions' message shape: ``{"role", "parts": [...]}`` with
    ``text``, ``tool_call`` and ``tool_call_response`` parts."""
    out = []
    for message in messages:
        role = str(message.get("role", "user"))
        content = message.get("content")
        parts: list[dict[str, Any]] = []
        if role == "tool":
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": message.get("tool_call_id"),
                    "response": content,
                }
            )
        elif isinstance(content, str) and content:
            parts.append({"type": "text", "content": content})
        elif isinstance(content, list):
            parts.extend(
                {"type": "text", "content": str(p.get("text", ""))}
                for p in content
                if isinstance(p, Mapping)
            )
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
        out.append({"role": role, "parts": parts})
    return out


def output_message(text: str, finished: bool) -> dict[str, Any]:
    return {
        "role": "assistant",
        "parts": [{"type": "text", "content": text}],
        "finish_reason": finish_reason(finished),
    }


def env_id_of(env: Any) -> str | None:
    spec = getattr(getattr(env, "unwrapped", env), "spec", None)
    name = getattr(spec, "id", None)
    return str(name) if name is not None else None
