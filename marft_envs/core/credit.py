"""Credit assignment: how a round's team reward is split into per-agent rewards.

Named rules (pass the name as ``credit=`` to any env):

- ``"team"``: every agent that acted in the episode so far gets the round's team reward.
- ``"graded"``: the graded agents (profile ``graded``, the paper's ``with_answer``) among those.
- ``"last"``: only the last agent to act this round gets it (the reference implementation).

``acted`` lists every agent that acted in the episode up to and including this round, ordered by
its latest action (so ``acted[-1]`` is this round's last agent). An agent may act only once per
round, so a multi-round team — a checker that sends work back to a writer while the planner,
done in round 1, waits — has agents that did not act in the final round; they share the team's
outcome all the same. Their reward reaches training through their most recent decision (an
earlier round): the rollout adds it there, and from there the return and GAE carry it back as
for any reward (see ``marft_algos.rollout.collector``).

A callable ``rule(reward, acted, profiles) -> {agent: reward}`` is accepted too. Agents that did
not receive credit get 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from marft_envs.core.profiles import AgentProfile

__all__ = ["CREDIT_RULES", "CreditRule", "assign_credit", "resolve_credit"]

CreditRule = Callable[[float, Sequence[str], Mapping[str, AgentProfile]], Mapping[str, float]]


def _team(
    reward: float, acted: Sequence[str], profiles: Mapping[str, AgentProfile]
) -> dict[str, float]:
    return {agent: reward for agent in acted}


def _graded(
    reward: float, acted: Sequence[str], profiles: Mapping[str, AgentProfile]
) -> dict[str, float]:
    return {agent: reward for agent in acted if profiles[agent].graded}


def _last(
    reward: float, acted: Sequence[str], profiles: Mapping[str, AgentProfile]
) -> dict[str, float]:
    return {acted[-1]: reward} if acted else {}


CREDIT_RULES: dict[str, CreditRule] = {"team": _team, "graded": _graded, "last": _last}


def resolve_credit(rule: str | CreditRule) -> CreditRule:
    """Turn a rule name or callable into a callable, with a clear error for unknown names."""
    if callable(rule):
        return rule
    if rule not in CREDIT_RULES:
        raise ValueError(
            f"Unknown credit assignment rule {rule!r}; use one of {sorted(CREDIT_RULES)} "
            f"or a callable (reward, acted, profiles) -> {{agent: reward}}."
        )
    return CREDIT_RULES[rule]


def assign_credit(
    rule: str | CreditRule,
    reward: float,
    acted: Sequence[str],
    profiles: Mapping[str, AgentProfile],
) -> dict[str, float]:
    """Per-agent rewards for every agent in ``profiles`` (0 for agents without credit)."""
    given = resolve_credit(rule)(float(reward), tuple(acted), profiles)
    unknown = set(given) - set(profiles)
    if unknown:
        raise ValueError(f"Credit rule gave reward to unknown agent(s) {sorted(unknown)}.")
    return {agent: float(given.get(agent, 0.0)) for agent in profiles}
