"""The support desk, version 2: v1's team on tickets where the route decides the answer.

=================  ==========================================================================
agents             router, billing, shipping, accounts, reviewer (``support-desk-v2``); one
                   agent, ``assistant``, making every call (``support-desk-single-v2``)
observation        the messages of each call (system prompt, examples, request)
action             the reply: the router's JSON hand-off, a specialist's answer, the
                   reviewer's verdict
reward             the team's, paid to every agent: ``success`` alone (see ``WEIGHTS``)
termination        the program returns (a failed hand-off ends the episode after one call)
version history    v0 (2026-11-25), v1 (2026-11-27): ``team.py``, ``team_v1.py``.
                   v2 (2026-11-28): every asked value is drawn per ticket and only the right
                   department's records hold it (v1's carriers, statuses, plans could be
                   guessed, its emails were the customer's name); two records per department;
                   the retry continues the specialist's exchange; reward success only;
                   rollouts at T = 0.5.
=================  ==========================================================================

Reward parts (``WEIGHTS``; the team reward is ``success`` plus their weighted sum):

==================  =========  ==================================================================
``success``         1          the final answer states the asked value and no other record's
                               value of that field (``team.grade``, unchanged from v0)
``parsed``          0          the router's reply held a JSON object with a known route
``verdict_form``    0          the reviewer's reply names exactly one of APPROVE and REVISE
``routed``          0          the route was the ticket's department (needs the label)
``approved``        0          the reviewer approved the first answer
``false_approval``  0          it approved a wrong first answer (needs the label)
``false_rejection`` 0          it sent back a right first answer (needs the label)
==================  =========  ==================================================================

No part but success is paid: v1's small observable parts (0.1 parsed, 0.05 verdict form) were
as large as the success differences its trainers had to find (RESULTS.md, "support-desk-v1").
Quitting pays 0, as does any failure; there is no per-call cost, so quitting never pays more.

The prompts are built by :func:`router_messages`, :func:`specialist_messages` and
:func:`reviewer_messages`; the program and ``signal_v2.py`` (the signal measurement) both use
them, so what is measured is what the env asks.
"""

from __future__ import annotations

import re
from typing import Any

import tickets_v2
from tickets_v2 import DEPARTMENTS, check_split, make_tasks, test_tasks

import marft_envs

__all__ = [
    "AGENTS",
    "DEPARTMENTS",
    "ENV_ID",
    "ORACLE_ID",
    "SINGLE_AGENT",
    "SINGLE_ID",
    "SINGLE_TOKENS",
    "check_split",
    "desk",
    "make_tasks",
    "register",
    "test_tasks",
]

ENV_ID = "support-desk-v2"
ORACLE_ID = "support-desk-oracle-v2"
#: One agent making every call of the same program (step 4's single-agent setting).
SINGLE_ID = "support-desk-single-v2"
AGENTS = ["router", *DEPARTMENTS, "reviewer"]
SINGLE_AGENT = "assistant"
MAX_CALLS = 4

#: Each agent's reply budget in tokens (``max_new_tokens_per_agent``).
TOKENS = {"router": 12, "billing": 24, "shipping": 24, "accounts": 24, "reviewer": 8}
#: The single agent gets the largest budget, so it is never short of tokens.
SINGLE_TOKENS = {SINGLE_AGENT: max(TOKENS.values())}
#: The rollouts' sampling temperature: at v1's 0.7 the specialists' first answers were right on
#: 33% of 72 training draws, at 0.5 on 60% (README.md, "support-desk-v2: step 1").
TEMPERATURE = 0.5

# --------------------------------------------------------------------------- the team's prompts
ROUTER = (
    "Route each customer request to one department: billing (invoices), shipping (orders) or "
    'accounts (user accounts). Reply with JSON only: {"route": "<department>"}'
)
#: One example per department, as chat turns (v1's), so no department is the default.
ROUTER_EXAMPLES = [
    {"role": "user", "content": "What is the amount of invoice 4821?"},
    {"role": "assistant", "content": '{"route": "billing"}'},
    {"role": "user", "content": "What is the tracking code of order 7390?"},
    {"role": "assistant", "content": '{"route": "shipping"}'},
    {"role": "user", "content": "What is the member code of Ada Lee?"},
    {"role": "assistant", "content": '{"route": "accounts"}'},
]
SPECIALIST = (
    "You are the {department} desk. Records:\n{records}\nAnswer with the value from the records."
)
#: The retry's last turn: the specialist's first call and its answer stay in the transcript.
RETRY = "Answer again from the records: {request}"
REVIEWER = (
    "Records:\n{records}\nReply APPROVE if the answer states the value the records give for the "
    "request, else REVISE."
)
#: Two example verdicts as chat turns (v1 showed that without them the reviewer writes none).
REVIEWER_EXAMPLES = [
    {
        "role": "user",
        "content": "Request: What is the amount of invoice 2222?\nAnswer: It is $99.",
    },
    {"role": "assistant", "content": "REVISE"},
    {
        "role": "user",
        "content": "Request: What is the amount of invoice 1111?\nAnswer: It is $50.",
    },
    {"role": "assistant", "content": "APPROVE"},
]

Messages = list[dict[str, str]]


def router_messages(task: dict[str, Any]) -> Messages:
    """The router's call: its instruction, one example per department, the request."""
    return [
        {"role": "system", "content": ROUTER},
        *ROUTER_EXAMPLES,
        {"role": "user", "content": task["request"]},
    ]


def specialist_messages(task: dict[str, Any], route: str, rejected: str | None = None) -> Messages:
    """``route``'s specialist's call on ``task``: its own department's records of this ticket
    only. ``rejected`` is the answer the reviewer sent back: the retry continues that exchange
    (the first answer as the assistant's turn, then ``RETRY``); None on the first try."""
    system = SPECIALIST.format(department=route, records=task["records"][route])
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task["request"]}]
    if rejected is not None:
        messages += [
            {"role": "assistant", "content": rejected.strip()},
            {"role": "user", "content": RETRY.format(request=task["request"])},
        ]
    return messages


def reviewer_messages(task: dict[str, Any], route: str, answer: str) -> Messages:
    """The reviewer's call: the routed department's records, the examples, request and answer."""
    return [
        {"role": "system", "content": REVIEWER.format(records=task["records"][route])},
        *REVIEWER_EXAMPLES,
        {"role": "user", "content": f"Request: {task['request']}\nAnswer: {answer.strip()}"},
    ]


_VERDICT = re.compile(r"\b(approve|revise)", re.IGNORECASE)


def verdict(reply: str) -> str | None:
    """``"approve"`` or ``"revise"`` when the reply names exactly one of them, else None."""
    found = {m.lower() for m in _VERDICT.findall(reply)}
    return found.pop() if len(found) == 1 else None


grade = tickets_v2.grade
parse_route = tickets_v2.parse_route


# --------------------------------------------------------------------------- the program
def _ask(client: Any, agent: str, messages: Messages) -> str:
    reply = client.chat.completions.create(model=agent, messages=messages)
    return reply.choices[0].message.content or ""


def desk(
    task: dict[str, Any], client: Any, *, oracle_route: bool = False, single: bool = False
) -> dict[str, float]:
    """One ticket through the desk; returns the reward parts.

    The router hands the ticket to a department; that specialist answers from its records; the
    reviewer approves the answer or sends it back once, and the specialist's second answer is
    final. ``oracle_route=True`` skips the router and hands the ticket to its department.
    ``single=True`` makes every call as the one agent ``assistant``: the same prompts, calls and
    reward, one model doing the whole job.
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
        route = parse_route(_ask(client, who("router"), router_messages(task)))
    parts["parsed"] = float(route is not None)
    parts["routed"] = float(route == task["department"])
    answer = ""
    if route is not None:
        answer = _ask(client, who(route), specialist_messages(task, route))
        said = verdict(_ask(client, who("reviewer"), reviewer_messages(task, route, answer)))
        first_right = grade(answer, task)
        approved = said == "approve"
        parts["verdict_form"] = float(said is not None)
        parts["approved"] = float(approved)
        parts["false_approval"] = float(approved and not first_right)
        parts["false_rejection"] = float(not approved and first_right)
        if not approved:
            answer = _ask(client, who(route), specialist_messages(task, route, rejected=answer))
    return {"success": float(grade(answer, task)), **parts}


def oracle_desk(task: dict[str, Any], client: Any) -> dict[str, float]:
    return desk(task, client, oracle_route=True)


def single_desk(task: dict[str, Any], client: Any) -> dict[str, float]:
    return desk(task, client, single=True)


#: The team reward's weights (``success`` is weighted 1); every other part is logged only.
WEIGHTS = {
    "parsed": 0.0,
    "verdict_form": 0.0,
    "routed": 0.0,
    "approved": 0.0,
    "false_approval": 0.0,
    "false_rejection": 0.0,
}


def team_reward(parts: dict[str, float]) -> float:
    """The team reward of one episode's parts (what the env pays every agent)."""
    return parts["success"] + sum(w * parts.get(k, 0.0) for k, w in WEIGHTS.items())


def register() -> None:
    """Register ``support-desk-v2``, ``support-desk-oracle-v2`` and ``support-desk-single-v2``
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
            tasks=make_tasks("train"),
            test_tasks=test_tasks(),
            reward_weights=WEIGHTS,
            max_calls=MAX_CALLS,
            description=f"Support desk v2: {what}.",
        )
