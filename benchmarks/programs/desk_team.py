"""The 5-agent help desk of ``scale.py``, in a module of its own that imports nothing heavy, as a
user's ``team.py`` would be (so ``isolation="process"`` forks it from the small zygote)."""

from __future__ import annotations

AGENTS = ["triage", "billing", "tech", "account", "qa"]
DEPARTMENTS = ("billing", "tech", "account")
REQUESTS = [
    ("I was charged twice for my plan this month.", "billing"),
    ("The app crashes when I open settings.", "tech"),
    ("How do I change the email on my profile?", "account"),
    ("My invoice shows the wrong VAT number.", "billing"),
    ("Login fails with error 500 since this morning.", "tech"),
    ("Please close my account and delete my data.", "account"),
] * 20


def help_desk(task, client):
    """Triage -> specialist -> QA, as a team written against the OpenAI client would be."""
    text, department = task
    route = client.chat.completions.create(
        model="triage",
        messages=[
            {"role": "system", "content": "Route the request: answer billing, tech or account."},
            {"role": "user", "content": text},
        ],
    )
    said = (route.choices[0].message.content or "").lower()
    routed = next((d for d in DEPARTMENTS if d in said), "billing")
    answer = client.chat.completions.create(
        model=routed,
        messages=[
            {"role": "system", "content": f"You are the {routed} specialist. Answer briefly."},
            {"role": "user", "content": text},
        ],
    )
    client.chat.completions.create(
        model="qa",
        messages=[
            {"role": "system", "content": "Review the answer: approve or reject."},
            {"role": "user", "content": f"{text}\n\n{answer.choices[0].message.content}"},
        ],
    )
    return {
        "success": float(routed == department),
        "cost": -0.05 * sum(client.counts.calls.values()),
    }
