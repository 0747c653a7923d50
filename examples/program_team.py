"""Train the team you already have: agent programs, trained as they are.

    python examples/program_team.py                          # the help desk, action-level MARFT
    python examples/program_team.py --env program-math-dual-v0 --algo grpo --num-generations 4

Two teams written the way production code is written, as plain functions over an OpenAI-style
client, registered as env ids with ``marft_envs.register_program``:

- ``helpdesk-v0``: a planner routes each request to a math or a writing specialist, and a critic
  approves the answer or sends it back once. Reward: success minus 0.02 per model call
  (reward parts ``success`` and ``cost``).
- ``program-math-dual-v0``: the paper's reasoner -> actor team, written as a program that sends
  exactly the messages the native ``math-dual-v7`` env sends (the tests check the prompt token
  ids are identical).

Any flag of ``marft train`` works (``--help``); the output goes to ``runs/program_team``.
"""

from __future__ import annotations

import sys

import marft_envs
from marft_envs.math import grade_answer, load_dataset
from marft_envs.math.profiles import DUAL_PROFILES

# --------------------------------------------------------------------------- the help desk
PLANNER = (
    "You route customer requests. Reply with one word: math (for a calculation) or writer (for "
    "anything else)."
)
SPECIALISTS = {
    "math": "You are the math specialist. Compute the answer and give it in \\boxed{}.",
    "writer": "You are the writing specialist. Answer the request in one short sentence.",
}
CRITIC = "You check answers. Reply APPROVE if the answer solves the request, else REVISE and why."


def run_team(task, client):
    """One request through the team; returns the reward parts."""

    def ask(agent, system, user):
        reply = client.chat.completions.create(
            model=agent,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        )
        return reply.choices[0].message.content or ""

    route = ask("planner", PLANNER, task["request"]).strip().lower()
    specialist = "math" if "math" in route else "writer"
    answer = ask(specialist, SPECIALISTS[specialist], task["request"])
    verdict = ask("critic", CRITIC, f"Request: {task['request']}\nAnswer: {answer}")
    if "REVISE" in verdict.upper():
        answer = ask(
            specialist,
            SPECIALISTS[specialist],
            f"{task['request']}\n\nA reviewer sent your answer back: {verdict}",
        )
    calls = sum(client.counts.calls.values())
    return {"success": float(grade_answer(answer, task["answer"])), "cost": -0.02 * calls}


def helpdesk_tasks(split):
    """Math requests from the built-in problems (their own train/test split)."""
    return [
        {"request": f"Please compute: {p.problem}", "answer": p.answer}
        for p in load_dataset(f"builtin:{split}")
    ]


# --------------------------------------------------------------------------- the dual math team
REASONER_PROMPT, ACTOR_PROMPT = (p.system_prompt for p in DUAL_PROFILES)


def dual_math(problem, client):
    """The reasoner -> actor team of math-dual-v7, as a program: the same messages. It grades
    with the grader alone (no problem text), so an unevaluated form that restates nothing, which
    math-dual-v7 accepts, is refused here as it was in v4."""
    question = f"Problem: {problem.problem}"
    steps = client.chat.completions.create(
        model="reasoner",
        messages=[
            {"role": "system", "content": REASONER_PROMPT},
            {"role": "user", "content": question},
        ],
    )
    answer = client.chat.completions.create(
        model="actor",
        messages=[
            {"role": "system", "content": ACTOR_PROMPT},
            {
                "role": "user",
                "content": f"{question}\n\n[reasoner]\n{steps.choices[0].message.content}",
            },
        ],
    )
    return {"success": float(grade_answer(answer.choices[0].message.content or "", problem.answer))}


marft_envs.register_program(
    "helpdesk-v0",
    run_team,
    agents=["planner", "math", "writer", "critic"],
    tasks=helpdesk_tasks("train"),
    test_tasks=helpdesk_tasks("test"),
    description="Planner -> math or writing specialist -> critic, as a program; success minus cost.",
)
marft_envs.register_program(
    "program-math-dual-v0",
    dual_math,
    agents=[{"role": "reasoner"}, {"role": "actor", "graded": True}],
    tasks=list(load_dataset("builtin:train")),
    test_tasks=list(load_dataset("builtin:test")),
    description="math-dual-v7's reasoner -> actor team, written as a program.",
)


def main(
    argv: list[str] | None = None,
    *,
    env: str = "helpdesk-v0",
    output_dir: str = "runs/program_team",
) -> dict:
    """``marft train`` on ``env`` unless ``--env`` names another, writing to ``output_dir``."""
    from marft_algos.cli import train
    from marft_algos.cli.main import configure_logging, quiet_third_party

    quiet_third_party()
    configure_logging()
    args = sys.argv[1:] if argv is None else argv
    if not any(a == "--env" or a.startswith("--env=") for a in args):
        args = ["--env", env, *args]
    return train.main(args, defaults={"output_dir": output_dir})


if __name__ == "__main__":
    from marft_algos.cli.main import guarded

    guarded(main, sys.argv[1:], "program_team.py")
