"""The support desk, version 1: the same team as ``team.py`` (v0), with a reward that has no
quitting trap, cheaper calls and a router shown one example per department.

=================  ==========================================================================
agents             router, billing, shipping, accounts, reviewer (``support-desk-v1``); one
                   agent, ``assistant``, making every call (``support-desk-single-v1``)
observation        the messages of each call (system prompt, examples, request)
action             the reply: the router's JSON hand-off, a specialist's answer, the
                   reviewer's verdict
reward             the team's, paid to every agent: ``success + 0.1 parsed + 0.05 verdict_form``
termination        the program returns (a failed hand-off ends the episode after one call)
version history    v0 (2026-11-25): success - 0.02 per call; the tuned teams learned to quit.
                   v1 (2026-11-27): the reward below, shorter prompts and replies, one router
                   example per department, two reviewer examples.
=================  ==========================================================================

Reward parts (``WEIGHTS``; the team reward is their weighted sum, with ``success`` weighted 1):

==================  =========  ==================================================================
``success``         1          the final answer states the asked value and no other record's
                               value of that field (``team.grade``, unchanged from v0)
``parsed``          0.1        the router's reply held a JSON object with a known route (a
                               production program sees this)
``verdict_form``    0.05       the reviewer's reply names exactly one of APPROVE and REVISE (a
                               production program sees this)
``routed``          0          the route was the request's department (needs the label)
``approved``        0          the reviewer approved the first answer
``false_approval``  0          it approved a wrong first answer (needs the label)
``false_rejection`` 0          it sent back a right first answer (needs the label)
==================  =========  ==================================================================

No per-call cost. Why giving up never pays: an episode whose hand-off does not parse ends
after one call with reward 0; one that parses earns at least 0.1 even when its answer fails; a
success earns at least 1.1. So quit (0) < fail after trying (0.1 to 0.15) < succeed (1.1 to
1.15), whatever the number of calls.

Tasks: ``team.make_tasks`` (v0's generator: three records per department, fresh every episode;
12 training and 12 held-out phrasings, disjoint names), with held-out tasks drawn from a new
seed. Each specialist and the reviewer see only the three records of the routed department.
Fixed on 2026-11-27, before any tuned run; see README.md.
"""

from __future__ import annotations

import re
from typing import Any

import team

import marft_envs

ENV_ID = "support-desk-v1"
ORACLE_ID = "support-desk-oracle-v1"
SINGLE_ID = "support-desk-single-v1"
AGENTS = ["router", "billing", "shipping", "accounts", "reviewer"]
SINGLE_AGENT = "assistant"
DEPARTMENTS = team.DEPARTMENTS
TEST_SEED = 20261127
MAX_CALLS = 8

#: Each agent's reply budget in tokens (the runner passes it as ``max_new_tokens_per_agent``);
#: the single agent gets the largest, so it is never short of tokens.
TOKENS = {"router": 12, "billing": 24, "shipping": 24, "accounts": 24, "reviewer": 8}
SINGLE_TOKENS = {SINGLE_AGENT: max(TOKENS.values())}

# --------------------------------------------------------------------------- the team's prompts
ROUTER = (
    "Route each customer request to one department: billing (invoices), shipping (orders) or "
    'accounts (user accounts). Reply with JSON only: {"route": "<department>"}'
)
#: One example per department, as chat turns, so that no department is the example's default
#: (v0 showed one billing example and routed 44 of 48 requests to billing).
ROUTER_EXAMPLES = [
    {"role": "user", "content": "What is the amount of invoice 4821?"},
    {"role": "assistant", "content": '{"route": "billing"}'},
    {"role": "user", "content": "Which carrier has order 7390?"},
    {"role": "assistant", "content": '{"route": "shipping"}'},
    {"role": "user", "content": "What email is on file for Ada Lee?"},
    {"role": "assistant", "content": '{"route": "accounts"}'},
]
SPECIALIST = (
    "You are the {department} specialist of a support desk. Records:\n{records}\nAnswer the "
    "customer in one short sentence."
)
REVIEWER = (
    "Records:\n{records}\nCheck the support answer against these records. Reply APPROVE if it "
    "states the right value, else REVISE."
)

#: Two example verdicts, as chat turns: without them the untuned reviewer answered neither
#: APPROVE nor REVISE on any of 16 training answers (0/16 greedy); with them, 16/16.
REVIEWER_EXAMPLES = [
    {
        "role": "user",
        "content": "Request: What is the amount of invoice 2222?\nAnswer: Invoice 2222 is $99.",
    },
    {"role": "assistant", "content": "REVISE"},
    {
        "role": "user",
        "content": "Request: What is the amount of invoice 1111?\nAnswer: Invoice 1111 is $50.",
    },
    {"role": "assistant", "content": "APPROVE"},
]

_VERDICT = re.compile(r"\b(approve|revise)", re.IGNORECASE)


def verdict(reply: str) -> str | None:
    """``"approve"`` or ``"revise"`` when the reply names exactly one of them (any case, any
    number of times), else None (no verdict in the expected form)."""
    found = {m.lower() for m in _VERDICT.findall(reply)}
    return found.pop() if len(found) == 1 else None


def test_tasks(count: int = 200, seed: int = TEST_SEED) -> list[dict[str, Any]]:
    """The fixed held-out tasks of v1 (v0's held-out phrasings and names, a new seed)."""
    return team.test_tasks(count, seed)


# --------------------------------------------------------------------------- the program
def desk(
    task: dict[str, Any], client: Any, *, oracle_route: bool = False, single: bool = False
) -> dict[str, float]:
    """One request through the desk; returns the reward parts.

    ``oracle_route=True`` skips the router and hands the request to the right department (the
    specialists' ceiling). ``single=True`` makes every call as the one agent ``assistant``: the
    same prompts, calls and reward, one model doing the whole job.
    """

    def who(role: str) -> str:
        return SINGLE_AGENT if single else role

    parts = dict.fromkeys(
        ("parsed", "verdict_form", "routed", "approved", "false_approval", "false_rejection"),
        0.0,
    )
    if oracle_route:
        route: str | None = task["department"]
    else:
        reply = team.ask(client, who("router"), ROUTER, task["request"], ROUTER_EXAMPLES)
        route = team.parse_route(reply)
    parts["parsed"] = float(route is not None)
    parts["routed"] = float(route == task["department"])
    answer = ""
    if route is not None:
        records = task["records"][route]
        specialist = SPECIALIST.format(department=route, records=records)
        answer = team.ask(client, who(route), specialist, task["request"])
        review = f"Request: {task['request']}\nAnswer: {answer}"
        check = REVIEWER.format(records=records)
        said = verdict(team.ask(client, who("reviewer"), check, review, REVIEWER_EXAMPLES))
        first_right = team.grade(answer, task)
        approved = said == "approve"
        parts["verdict_form"] = float(said is not None)
        parts["approved"] = float(approved)
        parts["false_approval"] = float(approved and not first_right)
        parts["false_rejection"] = float(not approved and first_right)
        if not approved:
            retry = f"{task['request']}\n\nA reviewer sent your answer back. Check the records."
            answer = team.ask(client, who(route), specialist, retry)
    return {"success": float(team.grade(answer, task)), **parts}


def oracle_desk(task: dict[str, Any], client: Any) -> dict[str, float]:
    return desk(task, client, oracle_route=True)


def single_desk(task: dict[str, Any], client: Any) -> dict[str, float]:
    return desk(task, client, single=True)


#: The team reward's weights (``success`` is weighted 1); the label-based parts are logged only.
WEIGHTS = {
    "parsed": 0.1,
    "verdict_form": 0.05,
    "routed": 0.0,
    "approved": 0.0,
    "false_approval": 0.0,
    "false_rejection": 0.0,
}


def team_reward(parts: dict[str, float]) -> float:
    """The team reward of one episode's parts (what the env pays every agent)."""
    return parts["success"] + sum(w * parts.get(k, 0.0) for k, w in WEIGHTS.items())


def register() -> None:
    """Register ``support-desk-v1``, ``support-desk-oracle-v1`` and ``support-desk-single-v1``
    (the benchmark's scripts call it; importing this module registers nothing)."""
    envs = (
        (ENV_ID, desk, AGENTS, "router -> billing/shipping/accounts specialist -> reviewer"),
        (ORACLE_ID, oracle_desk, AGENTS, "the right route handed to the specialists"),
        (SINGLE_ID, single_desk, [SINGLE_AGENT], "one agent makes every call of the desk"),
    )
    for env_id, program, agents, what in envs:
        if env_id in marft_envs.registry:
            continue
        marft_envs.register_program(
            env_id,
            program,
            agents=agents,
            tasks=team.make_tasks("train"),
            test_tasks=test_tasks(),
            reward_weights=WEIGHTS,
            max_calls=MAX_CALLS,
            description=f"Support desk v1: {what}.",
        )
