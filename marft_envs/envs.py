"""The built-in environments: one flat list of registrations (see ``docs/envs.md``)."""

from __future__ import annotations

from marft_envs.registration import register

# --- toy tasks that exercise the core -------------------------------------------------------
register(
    "relay-v0",
    "marft_envs.toy.relay:RelayEnv",
    description="Chain of agents relays a secret code from the scout to the graded reporter.",
)
register(
    "dispatch-v0",
    "marft_envs.toy.dispatch:DispatchEnv",
    description="Orchestrator routes a request to the calculator or the speller (dynamic D).",
)
