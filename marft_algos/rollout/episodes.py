"""What a rollout produces: each agent's decisions, the finished episodes, and the requests for them.

Every :class:`Decision` keeps exactly what the agent did (prompt token ids, generated token ids,
per-token log-probs) and when its model call ran; an :class:`Episode` holds its decisions in the
realised order with the rewards, the final info and when it ran. The collector
(:mod:`marft_algos.rollout.collector`) builds them; trainers, evaluation, transcripts and traces
read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Decision", "Episode", "EpisodeRequest"]


@dataclass
class Decision:
    """One agent action: one AEC step of one env copy.

    Attributes:
        episode: Index of the episode in the collector's output.
        timestep: Env round ``t`` of the decision.
        turn: Position of the agent in its round (0 = first to act).
        agent: The acting agent.
        prompt_ids: Token ids of the rendered rollout observation (exactly what the model read).
        action_ids: Generated token ids, exactly as sampled.
        log_probs: Per-token log-probs of ``action_ids`` under the rollout policy.
        text: The decoded action that was sent to the env.
        finished: The generation stopped at EOS (False: cut at ``max_new_tokens``).
        reward: Reward the env's credit rule gave this agent for the decision's round, plus
            what it was paid in later rounds where it did not act, undiscounted (see
            ``docs/maths.md``, "A reward paid to an agent in a later round").
        round_end: The decision was the last of its round (the env's transition ran after it).
        done: The episode ended after this decision's round.
        truncated: The episode ended by truncation (round limit) rather than termination.
        messages: The rollout observation as chat messages (what was rendered into
            ``prompt_ids``), kept so a model with another tokenizer (e.g. the critic's) can
            render it itself instead of reading ids of a foreign vocabulary.
        tools: The tools the observation offered (rendered with the messages), or None.
        policy_version: The adapters' version that sampled it (updates applied before; None:
            not recorded, the synchronous loop, where it is always the current one).
        proximal_log_probs: Per-token log-probs of ``action_ids`` under the weights at the start
            of the update that trains on it, set by the trainer when the decision is stale
            (sampled by an older version); None: fresh, ``log_probs`` are the proximal ones.
        proximal_from_update: The decision is stale and its proximal log-probs are the
            update's own forward pass, detached (set instead of ``proximal_log_probs`` when the
            update takes one optimizer step per agent, whose forward runs on the proximal
            weights: the separate pass would compute the same numbers).
        branch: With branching (:mod:`marft_algos.rollout.branching`): the node of the branch
            tree the decision belongs to (its alternative for a branched decision, else the
            continuation it was taken in); None without branching.
        branch_copy: With branching: a copy of a decision of the shared prefix that another
            episode of the tree holds too (trained once, there); False otherwise.
        started_ns: When its model call began (Unix epoch nanoseconds; a batched call's start,
            shared by the batch); None: not timed. Not part of equality.
        ended_ns: When its model call returned (Unix epoch nanoseconds); None: not timed.
    """

    episode: int
    timestep: int
    turn: int
    agent: str
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool
    reward: float = 0.0
    round_end: bool = False
    done: bool = False
    truncated: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    policy_version: int | None = None
    proximal_log_probs: list[float] | None = None
    proximal_from_update: bool = False
    branch: tuple[int, ...] | None = None
    branch_copy: bool = False
    started_ns: int | None = field(default=None, compare=False, repr=False)
    ended_ns: int | None = field(default=None, compare=False, repr=False)


@dataclass
class Episode:
    """A finished episode of one env copy.

    Attributes:
        seed: The ``reset`` seed (episodes with equal seeds and options face the same task).
        options: The ``reset`` options.
        decisions: Its decisions in the realised order.
        agent_returns: Sum of each agent's rewards.
        team_return: Sum of the rounds' team rewards ``r_t`` (before credit assignment).
        info: The final round's info (e.g. ``{"correct": True, ...}``).
        group: Caller-given group id (GRPO groups episodes of the same prompt).
        branch: With branching: the episode's leaf in the branch tree, ``(request, alternative,
            continuation, ...)``; None without branching.
        started_ns: When its env was reset (Unix epoch nanoseconds); None: not timed. Not part
            of equality.
        ended_ns: When its last round closed (Unix epoch nanoseconds); None: not timed.
    """

    seed: int
    options: dict[str, Any]
    decisions: list[Decision] = field(default_factory=list)
    agent_returns: dict[str, float] = field(default_factory=dict)
    team_return: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    group: int | None = None
    branch: tuple[int, ...] | None = None
    started_ns: int | None = field(default=None, compare=False, repr=False)
    ended_ns: int | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class EpisodeRequest:
    """An episode to run: its reset seed, reset options and (optional) group id."""

    seed: int
    options: Mapping[str, Any] | None = None
    group: int | None = None
