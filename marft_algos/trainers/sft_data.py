"""Recorded episodes for the supervised warm start: read them, keep the ones that pass a filter.

:func:`read_transcripts` reads, as :class:`Transcript` objects (one per episode, each a list of
:class:`Turn`: which agent read which messages and replied what):

- a marft run folder (its ``samples.jsonl`` or ``samples.jsonl.gz``), or such a file itself: one
  episode per line, as :mod:`marft_algos.runs.samples` writes it (``turns``, ``team_return``,
  ``correct``); the JSON that ``marft eval --samples N --json FILE`` writes (its ``samples``);
- a JSON-lines chat log: one model call per line::

      {"episode": "e1", "agent": "reasoner", "messages": [...], "reply": "...", "reward": 1.0}

  ``reply`` is the text the agent wrote, or an assistant message; without it, the last message
  of ``messages`` is the reply (it must be the assistant's). Lines with the same ``episode`` are
  one episode (a line without one is an episode of its own); ``reward`` is the episode's team
  reward (lines of one episode must not disagree); ``tools`` and ``finished`` (default true:
  the reply ended its turn) are optional, as is ``agent`` for a team of one.

:func:`keep_transcripts` applies ``min_reward`` (the team reward, rejection sampling from the
team's successes) and a user's ``module:function``. A bad line is one error naming the file, the
line and the field.
"""

from __future__ import annotations

import gzip
import importlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Transcript",
    "TranscriptError",
    "Turn",
    "keep_transcripts",
    "load_filter",
    "read_transcripts",
]

_SAMPLE_FILES = ("samples.jsonl", "samples.jsonl.gz")


class TranscriptError(ValueError):
    """A transcript file that cannot be read as asked (names the file, the line and the field)."""


@dataclass(frozen=True)
class Turn:
    """One agent reply of an episode.

    Attributes:
        agent: The agent that replied (None: not recorded, allowed for a team of one).
        messages: What it read, as chat messages (rendered with the agent's chat template).
        reply: What it wrote (the text, without end-of-turn tokens).
        tools: The tools its call offered, or None.
        finished: The reply ended the turn itself (False: it was cut at the token budget).
    """

    agent: str | None
    messages: list[dict[str, Any]]
    reply: str
    tools: list[dict[str, Any]] | None = None
    finished: bool = True


@dataclass
class Transcript:
    """One recorded episode.

    Attributes:
        turns: Its replies in the order they were made.
        reward: The team reward (a marft run's ``team_return``), or None when not recorded.
        correct: Whether the team solved it, where recorded.
        source: ``file:line`` of its (first) line.
        record: The recorded JSON object(s) as read, for user filters.
    """

    turns: list[Turn]
    reward: float | None
    correct: bool | None
    source: str
    record: dict[str, Any] = field(default_factory=dict)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            for number, line in enumerate(fh, 1):
                if line.strip():
                    yield number, line
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise TranscriptError(f"{path}: cannot be read ({exc}).") from None


def _source_file(path: Path) -> Path:
    if path.is_dir():
        for name in _SAMPLE_FILES:
            if (path / name).is_file():
                return path / name
        raise TranscriptError(
            f"{path} holds no {' or '.join(_SAMPLE_FILES)}; pass a marft run folder whose "
            f"evaluations wrote transcripts (eval_samples > 0), or a transcript file."
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such transcript file or run folder.")
    return path


def read_transcripts(source: str | Path) -> list[Transcript]:
    """Every episode recorded in ``source`` (a run folder or a file; see the module docstring).

    Raises:
        TranscriptError: A line that is not JSON, or lacks a field it needs (the message names the
            file, the line and the field).
        FileNotFoundError: ``source`` does not exist.
    """
    path = _source_file(Path(source))
    if path.suffix == ".json":
        return _eval_json(path)
    episodes: list[Transcript] = []
    calls: dict[Any, Transcript] = {}
    for number, line in _lines(path):
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"{where}: not JSON ({exc.msg}).") from None
        if not isinstance(row, dict):
            raise TranscriptError(
                f"{where}: a line must be a JSON object, got {type(row).__name__}."
            )
        if "turns" in row:
            episodes.append(_sample_episode(row, where))
        elif "messages" in row:
            _add_call(row, where, episodes, calls)
        else:
            raise TranscriptError(
                f"{where}: neither 'turns' (a marft transcript) nor 'messages' (a chat-log call); "
                f"the line has keys {sorted(row)}."
            )
    return episodes


def _eval_json(path: Path) -> list[Transcript]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TranscriptError(f"{path}: cannot be read as JSON ({exc}).") from None
    rows = data.get("samples") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise TranscriptError(
            f"{path}: a .json source must be marft eval's --json output with its 'samples' (run "
            f"marft eval RUN --samples N --json FILE); use .jsonl for one episode or call per line."
        )
    return [_sample_episode(row, f"{path}:samples[{i}]") for i, row in enumerate(rows)]


def _number(value: Any, where: str, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TranscriptError(f"{where}: field {name!r} must be a number, got {value!r}.")
    return float(value)


def _messages(value: Any, where: str, name: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in value
    ):
        raise TranscriptError(
            f"{where}: field {name!r} must be a list of chat messages, each with a 'role'."
        )
    return [dict(m) for m in value]


def _sample_episode(row: Mapping[str, Any], where: str) -> Transcript:
    turns = row.get("turns")
    if not isinstance(turns, list):
        raise TranscriptError(f"{where}: field 'turns' must be a list of the agents' turns.")
    out = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("agent"), str):
            raise TranscriptError(f"{where}: field 'turns[{i}].agent' is missing.")
        if not isinstance(turn.get("action"), str):
            raise TranscriptError(f"{where}: field 'turns[{i}].action' (the reply) is missing.")
        out.append(
            Turn(
                agent=turn["agent"],
                messages=_messages(turn.get("messages"), where, f"turns[{i}].messages"),
                reply=turn["action"],
                tools=turn.get("tools") or None,
                finished=bool(turn.get("finished", True)),
            )
        )
    correct = row.get("correct")
    return Transcript(
        turns=out,
        reward=_number(row.get("team_return"), where, "team_return"),
        correct=None if correct is None else bool(correct),
        source=where,
        record=dict(row),
    )


def _reply(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, Any]], str]:
    messages = _messages(row["messages"], where, "messages")
    reply = row.get("reply")
    if reply is None:
        if not messages or messages[-1]["role"] != "assistant":
            raise TranscriptError(
                f"{where}: field 'reply' is missing and the last message is not the assistant's; "
                f"give the agent's reply as 'reply' or as the last (assistant) message."
            )
        reply, messages = messages[-1], messages[:-1]
    if isinstance(reply, dict):
        if reply.get("tool_calls") and not reply.get("content"):
            raise TranscriptError(
                f"{where}: field 'reply' holds structured tool_calls and no text; give the reply "
                f"as the text the model wrote (e.g. its <tool_call> blocks)."
            )
        reply = reply.get("content")
    if not isinstance(reply, str):
        raise TranscriptError(f"{where}: field 'reply' must be text or an assistant message.")
    return messages, reply


def _add_call(
    row: Mapping[str, Any], where: str, episodes: list[Transcript], calls: dict[Any, Transcript]
) -> None:
    messages, reply = _reply(row, where)
    agent = row.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise TranscriptError(f"{where}: field 'agent' must be the agent's name, got {agent!r}.")
    turn = Turn(agent, messages, reply, row.get("tools") or None, bool(row.get("finished", True)))
    reward = _number(row.get("reward"), where, "reward")
    key = row.get("episode")
    episode = calls.get(key) if key is not None else None
    if episode is None:
        episode = Transcript([], reward, row.get("correct"), where, {"calls": []})
        episodes.append(episode)
        if key is not None:
            calls[key] = episode
    elif reward is not None:
        if episode.reward is not None and episode.reward != reward:
            raise TranscriptError(
                f"{where}: field 'reward' is {reward:g} but an earlier line of episode {key!r} "
                f"({episode.source}) gave {episode.reward:g}; an episode has one team reward."
            )
        episode.reward = reward
    episode.turns.append(turn)
    episode.record["calls"].append(dict(row))


def load_filter(spec: str) -> Callable[[Transcript], bool]:
    """The function ``spec`` (``module:function``) names.

    Raises:
        ValueError: The module does not import or has no such callable.
    """
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"filter {spec!r}: module {module_name!r} does not import ({exc}); put it on "
            f"PYTHONPATH or install it."
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"filter {spec!r}: {module_name} has no function {name!r}.")
    return function  # type: ignore[no-any-return]


def keep_transcripts(
    transcripts: Sequence[Transcript],
    *,
    min_reward: float | None = None,
    keep: Callable[[Transcript], bool] | None = None,
) -> list[Transcript]:
    """The episodes whose team reward is >= ``min_reward`` and for which ``keep`` returns True.

    Raises:
        TranscriptError: ``min_reward`` is set and an episode has no recorded reward.
    """
    kept = []
    for transcript in transcripts:
        if min_reward is not None:
            if transcript.reward is None:
                raise TranscriptError(
                    f"{transcript.source}: no team reward is recorded ('team_return' or "
                    f"'reward'), so --min-reward cannot judge it; record one, or filter with "
                    f"--filter module:function instead."
                )
            if transcript.reward < min_reward:
                continue
        if keep is not None and not keep(transcript):
            continue
        kept.append(transcript)
    return kept
