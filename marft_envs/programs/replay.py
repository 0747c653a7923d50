"""Replaying an episode up to a call: how an agent program branches (docs/programs.md, "Replay").

A program's state lives in its running code, so a branch point cannot copy it. The program runs
again instead, on the same task with the same seed (the env's ``reset`` seed draws the task and
seeds ``client.rng``), and its calls before the branch point are answered from the recorded
replies (the text and its token usage) without generating. Each replayed request is checked
against the recording by a digest of what the policy renders (the messages and the tools): a
program that does not repeat itself, because its control flow reads unseeded randomness, the
clock or the network, is named in one line with the first call that differed, and that episode is
failed with ``info["drop"]`` (it is never trained on a mismatched prefix).

Where the program runs (a thread, a child process) and what it calls (in process, HTTP) does not
matter here: a replayed call is an ordinary env step whose action is the recorded reply. Any
Flex-POMDP env whose episodes depend only on their seed and actions replays the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MISMATCH",
    "RecordedCall",
    "ReplayJob",
    "mismatch_info",
    "replay",
    "request_digest",
    "request_of",
]

#: ``info["program_error"]["type"]`` of an episode whose program did not repeat itself.
MISMATCH = "ReplayMismatch"


@dataclass(frozen=True)
class RecordedCall:
    """One answered call of the recording.

    Attributes:
        agent: The agent the call named.
        request: What the policy rendered (:func:`request_of`).
        reply: The text the call was answered with.
        usage: ``(prompt tokens, completion tokens, finished)`` of that reply, as the program saw
            them in its ``usage`` (cost terms read them).
    """

    agent: str
    request: Mapping[str, Any]
    reply: str = ""
    usage: tuple[int, int, bool] = (0, 0, True)


@dataclass(frozen=True)
class ReplayJob:
    """An env to reset with ``seed`` and ``options``, step through ``calls`` and leave waiting on
    ``at`` (the branch call: its agent and request; its reply is not used)."""

    env: Any
    seed: int
    options: Mapping[str, Any]
    calls: Sequence[RecordedCall]
    at: RecordedCall


def request_of(observation: Any) -> dict[str, Any]:
    """The request of an observation (``{"messages": ..., "tools": ...}`` or the bare messages),
    in one form: ``{"messages": [...], "tools": [...] or None}``."""
    if isinstance(observation, Mapping):
        return {
            "messages": [dict(m) for m in observation.get("messages", [])],
            "tools": [dict(t) for t in observation["tools"]] if observation.get("tools") else None,
        }
    return {"messages": [dict(m) for m in observation], "tools": None}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)


def request_digest(agent: str, request: Mapping[str, Any]) -> str:
    """SHA-256 of the agent and its request (messages and tools, canonical JSON)."""
    text = _canonical({"agent": agent, **request_of(request)})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _snippet(a: str, b: str) -> str:
    """Where two texts part: ``...common|'theirs' != ...common|'ours'`` around the first
    differing character."""
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, i - 20)
    return f"at character {i}: {a[start : i + 30]!r} != recorded {b[start : i + 30]!r}"


def _difference(recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> str:
    """What differs between two requests, in a few words (they are known to differ)."""
    old, new = recorded["messages"], replayed["messages"]
    for k, (a, b) in enumerate(zip(new, old, strict=False)):
        if a == b:
            continue
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                x, y = a.get(key), b.get(key)
                where = f"message {k} ({b.get('role', '?')}) {key}"
                if isinstance(x, str) and isinstance(y, str):
                    return f"{where} {_snippet(x, y)}"
                return f"{where}: {_canonical(x)[:60]} != recorded {_canonical(y)[:60]}"
    if len(new) != len(old):
        return f"it sent {len(new)} messages, the recording {len(old)}"
    return "its tools differed from the recorded ones"


def _describe(job: ReplayJob, index: int, target: RecordedCall) -> str | None:
    """Why the env's pending call is not ``target``; None when it is."""
    env = job.env
    agent = env.agent_selection
    if env.terminations.get(agent) or env.truncations.get(agent):
        return (
            f"the episode ended before call {index} (recorded for agent {target.agent!r}): the "
            f"program returned or raised where it made that call before"
        )
    if agent != target.agent:
        return f"call {index} named agent {agent!r}, the recording {target.agent!r}"
    replayed = request_of(env.observe(agent))
    if request_digest(agent, replayed) == request_digest(target.agent, target.request):
        return None
    return f"call {index} (agent {agent!r}) differed: {_difference(target.request, replayed)}"


def _name(env: Any) -> str:
    program = getattr(env.unwrapped, "program", None)
    return getattr(program, "__qualname__", None) or type(env.unwrapped).__name__


def mismatch_info(job: ReplayJob, reason: str, index: int) -> dict[str, Any]:
    """The final ``info`` of an episode whose replay went astray: a failure, always dropped."""
    message = (
        f"{_name(job.env)} did not repeat itself when replayed with seed {job.seed}: {reason}. "
        f"Draw its randomness from client.rng and keep the clock and the network out of its "
        f"control flow (docs/programs.md, 'Replay')."
    )
    target = job.calls[index] if index < len(job.calls) else job.at
    error = {
        "type": MISMATCH,
        "message": message,
        "agent": target.agent,
        "call": index,
        "traceback": "",
    }
    return {"program_error": error, "drop": True}


def replay(jobs: Sequence[ReplayJob]) -> list[dict[str, Any] | None]:
    """Reset every job's env and answer its calls from the recording, all envs in step (the
    programs of all copies run at once); each is left waiting on its ``at`` call.

    Returns:
        Per job, None when it repeated the recording up to ``at``, else the :func:`mismatch_info`
        of its first differing call (its env is left where it stopped; the next reset ends it).
    """
    for job in jobs:  # start every program before waiting on any (their first calls overlap)
        prepare = getattr(job.env.unwrapped, "prepare_reset", None)
        if prepare is not None:
            prepare(job.seed, dict(job.options))
    for job in jobs:
        job.env.reset(seed=job.seed, options=dict(job.options))
    outcome: list[dict[str, Any] | None] = [None] * len(jobs)
    for index in range(max((len(j.calls) for j in jobs), default=0) + 1):
        stepping = []
        for k, job in enumerate(jobs):
            if outcome[k] is not None or index > len(job.calls):
                continue
            target = job.calls[index] if index < len(job.calls) else job.at
            reason = _describe(job, index, target)
            if reason is not None:
                outcome[k] = mismatch_info(job, reason, index)
            elif index < len(job.calls):
                stepping.append(job)
        for job in stepping:  # hand every reply over before waiting on any program
            call, base = job.calls[index], job.env.unwrapped
            base.note_generation(*call.usage)
            base.prepare_step(call.reply)
        for job in stepping:
            job.env.step(job.calls[index].reply)
    return outcome
