"""Transcripts of held-out episodes: what every agent read, what it said, and what it got.

With a real model at 0% accuracy the first question is what the agents said. At each evaluation
the trainer appends the first ``config.eval_samples`` greedy held-out episodes to ``samples.jsonl``
in the run folder, one JSON object per episode::

    {"iteration": 10, "split": "eval", "episode": 0, "seed": 0, "options": {"index": 0}, "correct": false,
     "team_return": 0.0, "info": {...},
     "turns": [{"timestep": 0, "agent": "reasoner", "messages": [...], "action": "...",
                "reward": 0.0, "finished": true}, ...]}

``marft eval RUN --samples N`` prints N such transcripts (each agent's system prompt once, the
final info and its reward parts; ``--json`` includes them); :func:`transcript_table` is the short
terminal view the command line shows after training.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from marft_algos.rollout.collector import Episode
from marft_algos.rollout.evaluation import episode_correct

__all__ = [
    "SAMPLES_FILE",
    "episode_transcript",
    "print_transcripts",
    "read_samples",
    "transcript_table",
    "transcripts_markdown",
    "trim_samples",
    "write_samples",
]

#: File name of the transcripts in a run folder.
SAMPLES_FILE = "samples.jsonl"

_INFO_CHARS = 2000


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)[:_INFO_CHARS]


def episode_transcript(episode: Episode, index: int, split: str | None = None) -> dict[str, Any]:
    """One episode as JSON: every decision's observation messages, action, reward and whether the
    team was right (``info["correct"]``, else a positive return); marked with ``split`` when
    given (``"eval"``: a held-out episode, which ``marft sft`` leaves out)."""
    return {
        **({"split": split} if split is not None else {}),
        "episode": index,
        "seed": episode.seed,
        "options": _jsonable(episode.options),
        "correct": episode_correct(episode),
        "team_return": episode.team_return,
        "info": {k: _jsonable(v) for k, v in episode.info.items()},
        "turns": [
            {
                "timestep": d.timestep,
                "agent": d.agent,
                "messages": d.messages,
                **({"tools": d.tools} if d.tools else {}),
                "action": d.text,
                "reward": d.reward,
                "finished": d.finished,
            }
            for d in episode.decisions
        ],
    }


def write_samples(
    folder: str | Path, iteration: int, episodes: Sequence[Episode], count: int
) -> list[dict[str, Any]]:
    """Append the first ``count`` held-out episodes' transcripts, tagged with ``iteration`` and
    ``"split": "eval"`` (``marft sft`` leaves such episodes out); returns them."""
    rows = [
        {"iteration": iteration, **episode_transcript(e, i, split="eval")}
        for i, e in enumerate(episodes[:count])
    ]
    if rows:
        with (Path(folder) / SAMPLES_FILE).open("a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    return rows


def read_samples(folder: str | Path) -> list[dict[str, Any]]:
    """Every transcript in a run folder's ``samples.jsonl`` (none if it has no such file); a line
    torn by a kill is skipped."""
    path = Path(folder) / SAMPLES_FILE
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def trim_samples(folder: str | Path, last_iteration: int) -> None:
    """Keep the transcripts of iterations up to ``last_iteration`` (a resumed run redoes the rest;
    ``-1``: none)."""
    path = Path(folder) / SAMPLES_FILE
    if not path.is_file():
        return
    kept = [r for r in read_samples(folder) if r.get("iteration", 0) <= last_iteration]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    texts = [str(m.get("content", "")) for m in messages if m.get("role") != "system"]
    return texts[-1] if texts else ""


def _short(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def transcript_table(rows: Iterable[Mapping[str, Any]], *, title: str, width: int = 60) -> Any:
    """A rich table: one line per agent turn (episode, agent, what it said, reward, correct)."""
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for name in ("ep", "agent", "action", "reward", "correct"):
        table.add_column(name, justify="right" if name in ("ep", "reward") else "left")
    for row in rows:
        turns = row.get("turns") or []
        for i, turn in enumerate(turns):
            table.add_row(
                str(row.get("episode")) if i == 0 else "",
                str(turn.get("agent")),
                _short(str(turn.get("action", "")), width),
                f"{float(turn.get('reward', 0.0)):g}",
                ("yes" if row.get("correct") else "no") if i == len(turns) - 1 else "",
            )
    return table


def _system_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")


def print_transcripts(
    console: Any, rows: Iterable[Mapping[str, Any]], *, show_system: bool = False
) -> None:
    """Print whole transcripts: each agent's system prompt the first time it speaks (every turn
    with ``show_system``), for every turn what the agent read last and what it answered, then the
    env's final info (failure kind, solution, counters) and the reward parts."""
    shown: dict[str, str] = {}
    for row in rows:
        verdict = "correct" if row.get("correct") else "wrong"
        console.rule(
            f"episode {row.get('episode')} (seed {row.get('seed')}): {verdict}, team return "
            f"{float(row.get('team_return', 0.0)):g}"
        )
        for turn in row.get("turns") or []:
            agent = str(turn.get("agent"))
            system = _system_text(turn.get("messages") or [])
            if system and (show_system or shown.get(agent) != system):
                shown[agent] = system
                console.print(f"[bold]{agent}[/]'s system prompt:", markup=True)
                console.print(system, markup=False, style="dim")
            console.print(f"[bold]{agent}[/] (round {turn.get('timestep')}) read:", markup=True)
            console.print(_last_user_text(turn.get("messages") or []), markup=False)
            console.print(
                f"[bold]{agent}[/] said (reward {float(turn.get('reward', 0.0)):g}"
                + ("" if turn.get("finished", True) else ", cut at the token budget")
                + "):",
                markup=True,
            )
            console.print(str(turn.get("action", "")), markup=False)
        info = dict(row.get("info") or {})
        parts = info.pop("reward_parts", None)
        if info:
            console.print("[bold]final info[/]:", markup=True)
            console.print(json.dumps(info, ensure_ascii=False, default=repr), markup=False)
        if isinstance(parts, Mapping) and parts:
            console.print(
                "[bold]reward parts[/]: "
                + ", ".join(
                    f"{k} {v:g}" if isinstance(v, int | float) else f"{k} {v}"
                    for k, v in parts.items()
                ),
                markup=True,
            )


def transcripts_markdown(rows: Iterable[Mapping[str, Any]], width: int = 500) -> str:
    """Transcripts as Markdown (TensorBoard's text tab renders it): per episode, every turn's
    agent, reward and action."""
    parts = []
    for row in rows:
        verdict = "correct" if row.get("correct") else "wrong"
        parts.append(f"**episode {row.get('episode')}** ({verdict})")
        for turn in row.get("turns") or []:
            said = _short(str(turn.get("action", "")), width)
            parts.append(
                f"- *{turn.get('agent')}* (reward {float(turn.get('reward', 0.0)):g}): `{said}`"
            )
    return "\n".join(parts)
