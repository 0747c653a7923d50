"""The signal of ``support-desk-v2`` before any training, on the TRAINING split only.

Untuned SmolLM2-135M-Instruct, every agent at the rollouts' temperature (``team_v2.TEMPERATURE``)
unless greedy is said. On ``--tickets`` training tickets:

- every route (the right one and both wrong ones) x ``--continuations`` sampled continuations of
  the rest of the desk: the specialist's first answer, the reviewer's verdict, and the
  specialist's retry where the reviewer (or a perfect one) sends the answer back;
- the router: ``--continuations`` sampled hand-offs per ticket, and a greedy one;
- the untuned team, sampled (router sample k paired with continuation k of its route: one draw of
  the desk, since the continuations of a route are independent draws) and greedy (the env's
  program, ``team_v2.desk``, through a batching client);
- the ceilings: the right route handed over (``oracle route``), a perfect reviewer (approves
  exactly the right first answers), and both.

Every prompt comes from ``team_v2``'s message builders, which the env's program uses; grading is
``team_v2.grade``. The desk is driven directly with a forced route, not through the env (the
measurement needs every route, not the one the router picks). Writes ``results/signal_v2.json``.

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/program_team/signal_v2.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import team_v2
from runner import run_info

from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings

MODEL = "smollm2-135m-instruct"
BATCH = 64


def generate(policy: Any, agent: str, batch: list, settings: GenerationSettings) -> list[str]:
    """``agent``'s replies to ``batch``, generated ``BATCH`` at a time."""
    out: list[str] = []
    for start in range(0, len(batch), BATCH):
        chunk = batch[start : start + BATCH]
        out += [g.text for g in policy.generate(agent, chunk, settings, generator=None)]
    if len(batch) > 1:
        print(f"{time.strftime('%H:%M:%S')} {agent}: {len(batch)} replies", file=sys.stderr)
    return out


def by_agent(policy: Any, calls: list[tuple[str, list]], settings: GenerationSettings) -> list:
    """Replies to ``(agent, messages)`` calls, batched per agent, in the calls' order."""
    replies: list[str] = [""] * len(calls)
    for agent in {a for a, _ in calls}:
        index = [i for i, (a, _) in enumerate(calls) if a == agent]
        texts = generate(policy, agent, [calls[i][1] for i in index], settings)
        for i, text in zip(index, texts, strict=True):
            replies[i] = text
    return replies


def continuations(policy: Any, tickets: list[dict], k: int, settings: GenerationSettings) -> list:
    """Every ticket x route x ``k`` continuations: first answer, verdict, retry, outcomes."""
    rows = [
        {"ticket": t, "route": route, "draw": j}
        for t in range(len(tickets))
        for route in team_v2.DEPARTMENTS
        for j in range(k)
    ]
    first = by_agent(
        policy,
        [(r["route"], team_v2.specialist_messages(tickets[r["ticket"]], r["route"])) for r in rows],
        settings,
    )
    reviews = [
        team_v2.reviewer_messages(tickets[r["ticket"]], r["route"], a)
        for r, a in zip(rows, first, strict=True)
    ]
    said = [team_v2.verdict(v) for v in generate(policy, "reviewer", reviews, settings)]
    for r, a, v in zip(rows, first, said, strict=True):
        r.update(first=a, verdict=v, first_right=team_v2.grade(a, tickets[r["ticket"]]))
    need = [i for i, r in enumerate(rows) if r["verdict"] != "approve" or not r["first_right"]]
    retries = by_agent(
        policy,
        [
            (
                rows[i]["route"],
                team_v2.specialist_messages(
                    tickets[rows[i]["ticket"]], rows[i]["route"], rejected=rows[i]["first"]
                ),
            )
            for i in need
        ],
        settings,
    )
    for r in rows:
        r["retry"] = None
    for i, a in zip(need, retries, strict=True):
        rows[i]["retry"] = a
    for r in rows:
        task = tickets[r["ticket"]]
        retry_right = r["retry"] is not None and team_v2.grade(r["retry"], task)
        r["retry_right"] = retry_right
        # The desk: an approved first answer is final, else the retry.
        r["success"] = r["first_right"] if r["verdict"] == "approve" else retry_right
        # A perfect reviewer approves exactly the right first answers.
        r["success_perfect_reviewer"] = r["first_right"] or retry_right
    return rows


def rate(values: list) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def route_table(tickets: list[dict], rows: list[dict]) -> dict:
    """Success per (ticket's department, route), under the untuned and a perfect reviewer."""
    table: dict[str, dict[str, dict]] = {}
    for department in team_v2.DEPARTMENTS:
        table[department] = {}
        for route in team_v2.DEPARTMENTS:
            mine = [
                r
                for r in rows
                if tickets[r["ticket"]]["department"] == department and r["route"] == route
            ]
            table[department][route] = {
                "n": len(mine),
                "first_right": rate([r["first_right"] for r in mine]),
                "success": rate([r["success"] for r in mine]),
                "success_perfect_reviewer": rate([r["success_perfect_reviewer"] for r in mine]),
            }
    return table


def summary(tickets: list[dict], rows: list[dict], routes: list[list]) -> dict:
    """The signal, the ceilings and the untuned team (sampled) from the continuations."""
    right = [r for r in rows if r["route"] == tickets[r["ticket"]]["department"]]
    wrong = [r for r in rows if r["route"] != tickets[r["ticket"]]["department"]]
    reviewer_right = [(r["verdict"] == "approve") == r["first_right"] for r in right]
    team, team_perfect = [], []
    for t, sampled in enumerate(routes):
        for j, route in enumerate(sampled):
            hit = [r for r in rows if r["ticket"] == t and r["route"] == route and r["draw"] == j]
            team.append(bool(hit and hit[0]["success"]))
            team_perfect.append(bool(hit and hit[0]["success_perfect_reviewer"]))
    flat = [(t, route) for t, sampled in enumerate(routes) for route in sampled]
    return {
        "success_right_route": rate([r["success"] for r in right]),
        "success_wrong_route": rate([r["success"] for r in wrong]),
        "first_right_right_route": rate([r["first_right"] for r in right]),
        "first_right_wrong_route": rate([r["first_right"] for r in wrong]),
        "specialists_ceiling": rate([r["success_perfect_reviewer"] for r in right]),
        "router_parsed": rate([route is not None for _, route in flat]),
        "router_right": rate([route == tickets[t]["department"] for t, route in flat]),
        "router_routes": dict(Counter(str(route) for _, route in flat)),
        "reviewer_form": rate([r["verdict"] is not None for r in right]),
        "reviewer_approves": rate([r["verdict"] == "approve" for r in right]),
        "reviewer_right_verdict": rate(reviewer_right),
        "false_approvals": rate(
            [r["verdict"] == "approve" and not r["first_right"] for r in right]
        ),
        "false_rejections": rate([r["verdict"] != "approve" and r["first_right"] for r in right]),
        "retry_right_after_wrong": rate([r["retry_right"] for r in right if not r["first_right"]]),
        "retry_right_after_right": rate(
            [r["retry_right"] for r in right if r["first_right"] and r["retry"] is not None]
        ),
        "team_sampled": rate(team),
        "team_sampled_perfect_reviewer": rate(team_perfect),
        "per_route": route_table(tickets, rows),
    }


class BatchlessClient:
    """The OpenAI-style client ``team_v2.desk`` calls, answering one call at a time greedily."""

    def __init__(self, policy: Any, settings: GenerationSettings) -> None:
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))
        self._policy, self._settings = policy, settings

    def _create(self, *, model: str, messages: list) -> Any:
        text = generate(self._policy, model, [messages], self._settings)[0]
        message = SimpleNamespace(content=text)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


def greedy_team(policy: Any, tickets: list[dict], settings: GenerationSettings) -> dict:
    """The env's program, greedy, on every ticket: the desk and the oracle-route desk."""
    client = BatchlessClient(policy, settings)
    out: dict[str, Any] = {}
    for name, oracle in (("desk", False), ("oracle_route", True)):
        parts = [team_v2.desk(t, client, oracle_route=oracle) for t in tickets]
        out[name] = {k: rate([p[k] for p in parts]) for k in parts[0]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickets", type=int, default=33)
    parser.add_argument("--continuations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7, help="draws the training tickets")
    parser.add_argument("--design", default="v2", help="a label stored with the numbers")
    parser.add_argument("--skip-greedy", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    team_v2.register()
    policy = MultiAgentPolicy.from_pretrained(MODEL, team_v2.AGENTS, seed=0)
    rng = np.random.default_rng(args.seed)
    draw = team_v2.make_tasks("train")
    # Equal numbers of tickets per department, so each department's row has the same weight.
    tickets: list[dict] = []
    per = -(-args.tickets // len(team_v2.DEPARTMENTS))
    while len(tickets) < per * len(team_v2.DEPARTMENTS):
        t = draw(rng)
        if sum(x["department"] == t["department"] for x in tickets) < per:
            tickets.append(t)
    sampled = GenerationSettings(
        max_new_tokens=24,
        temperature=team_v2.TEMPERATURE,
        max_new_tokens_per_agent=team_v2.TOKENS,
    )
    greedy = GenerationSettings(
        max_new_tokens=24, do_sample=False, max_new_tokens_per_agent=team_v2.TOKENS
    )
    start = time.perf_counter()
    k = args.continuations
    router_calls = [team_v2.router_messages(t) for t in tickets for _ in range(k)]
    replies = generate(policy, "router", router_calls, sampled)
    routes = [
        [team_v2.parse_route(replies[t * k + j]) for j in range(k)] for t in range(len(tickets))
    ]
    rows = continuations(policy, tickets, k, sampled)
    result: dict[str, Any] = {
        "design": args.design,
        "model": MODEL,
        "split": "train",
        "tickets": len(tickets),
        "continuations": k,
        "temperature": team_v2.TEMPERATURE,
        "tokens": team_v2.TOKENS,
        "sampled": summary(tickets, rows, routes),
    }
    greedy_routes = [
        team_v2.parse_route(r)
        for r in generate(policy, "router", [team_v2.router_messages(t) for t in tickets], greedy)
    ]
    result["router_greedy_right"] = rate(
        [r == t["department"] for r, t in zip(greedy_routes, tickets, strict=True)]
    )
    result["router_greedy_routes"] = dict(Counter(map(str, greedy_routes)))
    if not args.skip_greedy:
        result["greedy"] = greedy_team(policy, tickets, greedy)
    result["seconds"] = round(time.perf_counter() - start, 1)
    result["examples"] = [
        {
            "request": tickets[r["ticket"]]["request"],
            "answer": tickets[r["ticket"]]["answer"],
            "route": r["route"],
            "first": r["first"],
            "verdict": r["verdict"],
            "retry": r["retry"],
        }
        for r in rows[:: max(1, len(rows) // 24)]
    ]
    result["run_info"] = run_info([team_v2.ENV_ID], argv=sys.argv[1:])
    print(json.dumps({k: v for k, v in result.items() if k != "examples"}, indent=1), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "signal_v2.json" if args.design == "v2" else f"signal_v2_{args.design}.json"
    (args.out / name).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
