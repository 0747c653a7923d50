"""Recorded episodes for the supervised warm start: read them, keep the ones that pass a filter.

:func:`read_transcripts` reads, as :class:`Transcript` objects (one per episode, each a list of
:class:`Turn`: which agent read which messages and replied what):

- a marft run folder (its ``samples.jsonl`` or ``samples.jsonl.gz``), or such a file itself: one
  episode per line, as :mod:`marft_algos.runs.samples` writes it (``turns``, ``team_return``,
  ``correct``); the JSON that ``marft eval --samples N --json FILE`` writes (its ``samples``);
- recorded traces, through :func:`marft_envs.programs.traces.read_trace_calls`: OTLP JSON files
  (the spans of ``opentelemetry-instrumentation-openai-v2``, OpenInference, or marft's own with
  ``trace_content``) and JSON-lines chat logs (``{"messages": [...], "output": ..., "agent": ...,
  "episode": ...}`` a line; docs/programs.md, "From production traces"). The team reward is the
  root span's ``marft.reward`` attribute, or a chat-log record's ``reward`` field (the records of
  one episode must not disagree); a call whose finish reason is ``length`` was cut at its budget.

:func:`keep_transcripts` leaves out held-out episodes (:attr:`Transcript.held_out`: what marft
recorded while evaluating, which a tuned team must not have trained on) unless asked to keep them,
then applies ``min_reward`` (the team reward, rejection sampling from the team's successes) and a
user's ``module:function``. A bad line is one error naming the file, the line and the field.
"""

from __future__ import annotations

import dataclasses
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
        tool_calls: Structured tool calls the reply made (recorded traces); such a turn is not
            trained on (its text in the model's own tool format is not recorded).
    """

    agent: str | None
    messages: list[dict[str, Any]]
    reply: str
    tools: list[dict[str, Any]] | None = None
    finished: bool = True
    tool_calls: list[dict[str, Any]] | None = None


@dataclass
class Transcript:
    """One recorded episode.

    Attributes:
        turns: Its replies in the order they were made.
        reward: The team reward (a marft run's ``team_return``), or None when not recorded.
        correct: Whether the team solved it, where recorded.
        source: ``file:line`` of its (first) line.
        record: What was recorded, for user filters: a marft transcript's JSON object; for a
            trace, ``episode`` (its id), ``attributes`` (its root span's, e.g. ``marft.split``)
            and ``records`` (a chat log's records).
    """

    turns: list[Turn]
    reward: float | None
    correct: bool | None
    source: str
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def split(self) -> str | None:
        """The split marft recorded the episode in: a transcript row's ``split`` (a row without
        one is ``"eval"``: marft writes such rows only from evaluations, ``samples.jsonl`` and
        ``marft eval --json``), a trace's root ``marft.split``, or a chat-log record's ``split``;
        None when nothing says (a production trace)."""
        if "turns" in self.record:  # a marft transcript row
            return str(self.record.get("split", "eval"))
        split = (self.record.get("attributes") or {}).get("marft.split")
        for record in self.record.get("records") or ():
            split = split or record.get("split")
        return None if split is None else str(split)

    @property
    def held_out(self) -> bool:
        """Recorded in an evaluation (any split but ``"train"``): its task belongs to the held-out
        problems, and training on it would leave no honest evaluation of the tuned team."""
        return self.split not in (None, "train")


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
    """The transcript file of a run folder, or ``path`` itself (a file, or a folder of traces)."""
    if path.is_dir():
        for name in _SAMPLE_FILES:
            if (path / name).is_file():
                return path / name
        if (path / "config.json").is_file():
            raise TranscriptError(
                f"{path} holds no {' or '.join(_SAMPLE_FILES)}; pass a marft run folder whose "
                f"evaluations wrote transcripts (eval_samples > 0), or a transcript file."
            )
        return path
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such transcript file or run folder.")
    return path


def read_transcripts(
    source: str | Path, *, agents: Mapping[str, str] | None = None
) -> list[Transcript]:
    """Every episode recorded in ``source`` (a run folder or a file; see the module docstring).

    Args:
        source: A run folder, a transcript file, marft eval's JSON, an OTLP JSON file or a chat log.
        agents: Recorded agent names to the team's (names it lacks stay as they are).

    Raises:
        TranscriptError: A line that is not JSON, or lacks a field it needs (the message names the
            file, the line and the field); traces raise the loader's ``TraceFormatError``.
        FileNotFoundError: ``source`` does not exist.
    """
    path = _source_file(Path(source))
    if path.is_dir():
        return _trace_transcripts(path, agents)
    if path.suffix == ".json" and _is_eval_json(path):
        episodes = _eval_json(path)
    elif _is_samples(path):
        episodes = _samples(path)
    else:
        return _trace_transcripts(path, agents)
    if agents:
        for episode in episodes:
            episode.turns = [
                dataclasses.replace(t, agent=agents.get(t.agent, t.agent) if t.agent else None)
                for t in episode.turns
            ]
    return episodes


def _is_samples(path: Path) -> bool:
    """Whether the file's first line is a marft transcript (it has ``turns``)."""
    for _, line in _lines(path):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            return False
        return isinstance(row, dict) and "turns" in row
    return False


def _samples(path: Path) -> list[Transcript]:
    episodes = []
    for number, line in _lines(path):
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"{where}: not JSON ({exc.msg}).") from None
        if not isinstance(row, dict) or "turns" not in row:
            raise TranscriptError(
                f"{where}: field 'turns' is missing (the file's first line is a marft transcript, "
                f"so every line must be one)."
            )
        episodes.append(_sample_episode(row, where))
    return episodes


def _is_eval_json(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and "samples" in data


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


def _root_attributes(trace: Any) -> dict[str, Any]:
    """The root span's attributes ({} for a chat log or a trace without one root)."""
    from marft_envs.programs.traces import TraceFormatError

    if not trace.spans:
        return {}
    try:
        return dict(trace.root().attributes)
    except TraceFormatError:
        return {}


def _trace_reward(trace: Any) -> tuple[float | None, bool | None]:
    """The team reward and success a trace records: its root span's ``marft.reward`` and
    ``marft.correct``, or a chat-log record's ``reward`` and ``correct``."""
    if trace.spans:
        attributes = _root_attributes(trace)
        correct = attributes.get("marft.correct")
        reward = _number(attributes.get("marft.reward"), trace.where, "marft.reward")
        return reward, None if correct is None else bool(correct)
    reward, correct, first = None, None, trace.where
    for record, where in zip(trace.records, trace.record_where, strict=True):
        value = _number(record.get("reward"), where, "reward")
        if value is not None and reward is not None and value != reward:
            raise TranscriptError(
                f"{where}: field 'reward' is {value:g} but an earlier record of the episode "
                f"({first}) gave {reward:g}; an episode has one team reward."
            )
        if value is not None:
            reward, first = value, where
        if record.get("correct") is not None:
            correct = bool(record["correct"])
    return reward, correct


def _trace_transcripts(path: Path, agents: Mapping[str, str] | None) -> list[Transcript]:
    from marft_envs.programs.traces import read_trace_calls
    from marft_envs.programs.traces.chatlog import DEFAULT_AGENT

    out = []
    for trace in read_trace_calls(path, agents=dict(agents) if agents else None):
        turns = [
            Turn(
                agent=None if call.agent == DEFAULT_AGENT else call.agent,
                messages=[dict(m) for m in call.messages],
                reply=call.reply,
                finished=call.finish_reason != "length",
                tool_calls=call.output.get("tool_calls") or None,
            )
            for call in trace.calls
        ]
        reward, correct = _trace_reward(trace)
        record = {
            "episode": trace.episode,
            "attributes": _root_attributes(trace),
            "records": list(trace.records),
        }
        out.append(Transcript(turns, reward, correct, trace.where, record))
    return out


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
    allow_held_out: bool = False,
) -> list[Transcript]:
    """The episodes whose team reward is >= ``min_reward`` and for which ``keep`` returns True,
    without the held-out ones (:attr:`Transcript.held_out`) unless ``allow_held_out``.

    Raises:
        TranscriptError: ``min_reward`` is set and an episode has no recorded reward.
    """
    kept = []
    for transcript in transcripts:
        if transcript.held_out and not allow_held_out:
            continue
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
