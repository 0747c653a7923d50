"""Budgets shared by the command-line and example tests (a module of its own: ``conftest`` names
clash; importable from every test folder, as tests/ is on the path of its conftest)."""

from __future__ import annotations

#: A budget that runs an iteration in about a second on one CPU thread.
TINY = [
    "--max-new-tokens",
    "6",
    "--eval-episodes",
    "4",
    "--episodes-per-iteration",
    "4",
    "--rollout-threads",
    "4",
]
