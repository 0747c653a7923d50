"""One padded rollout batch per update, and the minibatches every trainer iterates over.

Pure data plumbing (no model, no env): :func:`build_rollout_batch` pads the decisions of a batch of
episodes once — token ids, masks, old log-probs, agent ids, episode rows — and the trainer fills in
values, advantages and returns. :meth:`RolloutBatch.minibatches` shuffles whole episodes into
minibatches (so an episode's decisions stay together, as the GAE targets were computed over them)
and yields :class:`RolloutBatch` views; :meth:`RolloutBatch.chunks` splits one agent's share of a
minibatch for gradient accumulation. Indexing a batch with decision indices gives a smaller batch
of the same type, so every consumer reads the same typed fields.

Shapes: ``N`` decisions, ``T`` the longest action in tokens. Advantages, returns and values are
``(N,)`` at action level and ``(N, T)`` at token level (0 on padding).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

__all__ = ["RolloutBatch", "build_rollout_batch"]


class _Decision(Protocol):
    agent: str
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str


class _Episode(Protocol):
    @property
    def decisions(self) -> Sequence[_Decision]: ...


@dataclass(frozen=True)
class RolloutBatch:
    """Every decision of one update, padded once.

    Attributes:
        agents: Acting agent of each decision, ``N`` names.
        prompt_ids: Rendered prompt ids of each decision (the acting model's tokenizer).
        action_ids: ``(N, T)`` generated ids, 0 on padding.
        action_mask: ``(N, T)`` bool, True on generated tokens.
        old_log_probs: ``(N, T)`` rollout log-probs, 0 on padding.
        episode: ``(N,)`` row of the decision's episode in the update's episode list.
        word_counts: ``(N,)`` words of each decoded action (≥ 1), for word normalisation.
        token_caps: ``(N,)`` the acting agent's ``max_new_tokens``, for Dr. GRPO's constant.
        critic_prompt_ids: Prompt ids in the critic's tokenizer (None: same as ``prompt_ids``).
        values: Rollout values, ``(N,)`` or ``(N, T)``; None for critic-free trainers.
        advantages: ``(N,)`` or ``(N, T)``.
        returns: Value targets, shaped like ``values``; None without a critic.
        proximal_log_probs: ``(N, T)`` log-probs under the weights at the start of the update,
            for stale decisions (the decoupled objective, ``docs/maths.md``); None when every
            decision is fresh (the plain surrogate against ``old_log_probs``).
        proximal_from_update: ``(N,)`` bool, True for stale decisions whose proximal log-probs
            are the update's own forward pass, detached (an update of one optimizer step per
            agent); None when no decision is marked so.
    """

    agents: tuple[str, ...]
    prompt_ids: tuple[list[int], ...]
    action_ids: Tensor
    action_mask: Tensor
    old_log_probs: Tensor
    episode: Tensor
    word_counts: Tensor
    token_caps: Tensor
    critic_prompt_ids: tuple[list[int], ...] | None = None
    values: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None
    proximal_log_probs: Tensor | None = None
    proximal_from_update: Tensor | None = None

    def __len__(self) -> int:
        return len(self.agents)

    @property
    def lengths(self) -> Tensor:
        """``(N,)`` number of generated tokens of each decision."""
        return self.action_mask.sum(-1)

    def action_lists(self) -> list[list[int]]:
        """Generated ids of each decision without padding (what the policy's forward takes)."""
        return [
            row[: int(n)].tolist() for row, n in zip(self.action_ids, self.lengths, strict=True)
        ]

    def critic_prompts(self) -> list[list[int]]:
        """Prompt ids for the critic: re-rendered in its tokenizer where that differs."""
        return list(
            self.critic_prompt_ids if self.critic_prompt_ids is not None else self.prompt_ids
        )

    def __getitem__(self, index: Sequence[int] | Tensor | np.ndarray) -> RolloutBatch:
        """The decisions at ``index`` as a batch of the same type (token columns kept)."""
        idx = torch.as_tensor(np.asarray(index, dtype=np.int64))
        picked: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                picked[f.name] = None
            elif isinstance(value, Tensor):
                picked[f.name] = value[idx]
            else:
                picked[f.name] = tuple(value[int(i)] for i in idx)
        return RolloutBatch(**picked)

    def with_targets(
        self,
        *,
        advantages: Tensor,
        values: Tensor | None = None,
        returns: Tensor | None = None,
        critic_prompt_ids: Sequence[list[int]] | None = None,
    ) -> RolloutBatch:
        """A copy with advantages (and values, returns, critic prompts) filled in."""
        if advantages.shape[0] != len(self):
            raise ValueError(
                f"advantages has {advantages.shape[0]} rows for {len(self)} decisions."
            )
        return replace(
            self,
            advantages=advantages,
            values=values,
            returns=returns,
            critic_prompt_ids=None if critic_prompt_ids is None else tuple(critic_prompt_ids),
        )

    def with_proximal(self, proximal_log_probs: Tensor) -> RolloutBatch:
        """A copy whose proximal log-probs are ``proximal_log_probs`` (``(N, T)``) for every row,
        none marked ``proximal_from_update``: the batch as a separate proximal pass gives it."""
        if proximal_log_probs.shape != self.old_log_probs.shape:
            raise ValueError(
                f"proximal_log_probs {tuple(proximal_log_probs.shape)} and old_log_probs "
                f"{tuple(self.old_log_probs.shape)} differ"
            )
        return replace(self, proximal_log_probs=proximal_log_probs, proximal_from_update=None)

    def indices_of(self, agent: str) -> list[int]:
        """Decision indices of one agent, in order."""
        return [k for k, a in enumerate(self.agents) if a == agent]

    def minibatches(
        self,
        rng: np.random.Generator,
        num_minibatches: int,
        num_episodes: int | None = None,
        *,
        first_episode: int = 0,
        total_episodes: int | None = None,
    ) -> Iterator[RolloutBatch]:
        """The decisions of each minibatch (see :meth:`minibatch_indices`) as batches."""
        for index in self.minibatch_indices(
            rng,
            num_minibatches,
            num_episodes,
            first_episode=first_episode,
            total_episodes=total_episodes,
        ):
            yield self[index]

    def minibatch_indices(
        self,
        rng: np.random.Generator,
        num_minibatches: int,
        num_episodes: int | None = None,
        *,
        first_episode: int = 0,
        total_episodes: int | None = None,
    ) -> list[np.ndarray]:
        """Shuffle the episodes and split them into ``num_minibatches`` near-equal groups; return
        the decision indices of each group — always ``num_minibatches`` arrays, some possibly
        empty (data-parallel ranks must take the same number of steps).

        The shuffle is drawn over global episode indices ``0 .. total_episodes - 1``; this batch
        holds episodes ``first_episode ..`` of them (a data-parallel rank's share, ranks in
        order). Every rank draws the same permutation from the same ``rng`` state and keeps its
        own episodes of each group, so the global minibatches are those of one process holding
        every episode, whatever the number of processes.

        Args:
            rng: Shuffles the episode order (advanced once per call, alike on every rank).
            num_minibatches: Groups to split the episodes into.
            num_episodes: Episodes the batch was built from (default: the highest row + 1).
            first_episode: Global index of this batch's episode row 0.
            total_episodes: Episodes over all ranks (default: ``first_episode + num_episodes``).
        """
        rows = (
            num_episodes
            if num_episodes is not None
            else (int(self.episode.max()) + 1 if len(self) else 0)
        )
        total = first_episode + rows if total_episodes is None else total_episodes
        if not 0 <= first_episode <= first_episode + rows <= total:
            raise ValueError(
                f"Episodes {first_episode}..{first_episode + rows - 1} of this batch do not fit in "
                f"the {total} episodes of the global batch."
            )
        order = np.arange(total)
        rng.shuffle(order)
        episode = self.episode.numpy() + first_episode
        return [
            np.flatnonzero(np.isin(episode, members))
            for members in np.array_split(order, num_minibatches)
        ]

    def chunks(self, n: int, max_tokens: int | None = None) -> Iterator[RolloutBatch]:
        """Contiguous, near-equal, non-empty parts for gradient accumulation (:meth:`split_rows`
        of every row); none for an empty batch."""
        for part in self.split_rows(np.arange(len(self)), n, max_tokens):
            yield self[part]

    def split_rows(
        self, rows: Sequence[int] | np.ndarray, n: int, max_tokens: int | None = None
    ) -> list[np.ndarray]:
        """``rows`` in contiguous, near-equal, non-empty parts: ``n`` of them, or more where a
        part would hold more than ``max_tokens`` padded tokens (its rows times the longest prompt
        plus the longest action among ``rows``, the width a forward pads them to); never more
        parts than rows.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return []
        parts = n
        if max_tokens is not None:
            width = max(len(self.prompt_ids[r]) for r in rows) + int(
                self.lengths[torch.as_tensor(rows)].max()
            )
            parts = max(n, -(-len(rows) * width // max_tokens))
        return [part for part in np.array_split(rows, min(parts, len(rows))) if len(part)]


def build_rollout_batch(
    episodes: Sequence[_Episode],
    *,
    agents: Sequence[str] | None = None,
    token_caps: Mapping[str, int] | None = None,
    default_cap: int = 0,
) -> RolloutBatch:
    """Pad every decision of ``episodes`` (in episode order) into one :class:`RolloutBatch`.

    Args:
        episodes: Finished episodes; their decisions keep their realised order.
        agents: Keep only decisions of these agents (default: all). Episode rows still count every
            episode, so advantages computed over whole episodes line up.
        token_caps: Per-agent ``max_new_tokens`` overrides.
        default_cap: ``max_new_tokens`` of agents without an override.

    Returns:
        The batch, without values or advantages.
    """
    keep = None if agents is None else set(agents)
    rows: list[tuple[int, _Decision]] = [
        (row, d)
        for row, e in enumerate(episodes)
        for d in e.decisions
        if keep is None or d.agent in keep
    ]
    width = max((len(d.action_ids) for _, d in rows), default=0)
    n = len(rows)
    action_ids = torch.zeros(n, width, dtype=torch.long)
    action_mask = torch.zeros(n, width, dtype=torch.bool)
    old = torch.zeros(n, width)
    for k, (_, d) in enumerate(rows):
        if len(d.log_probs) != len(d.action_ids):
            raise ValueError(
                f"Decision {k} of agent {d.agent!r} has {len(d.action_ids)} tokens but "
                f"{len(d.log_probs)} log-probs; decisions must come from the rollout collector."
            )
        length = len(d.action_ids)
        action_ids[k, :length] = torch.as_tensor(d.action_ids, dtype=torch.long)
        action_mask[k, :length] = True
        old[k, :length] = torch.as_tensor(d.log_probs, dtype=torch.float32)
    proximal = _proximal_log_probs([d for _, d in rows], old)
    caps = dict(token_caps or {})
    return RolloutBatch(
        agents=tuple(d.agent for _, d in rows),
        prompt_ids=tuple(list(d.prompt_ids) for _, d in rows),
        action_ids=action_ids,
        action_mask=action_mask,
        old_log_probs=old,
        episode=torch.tensor([row for row, _ in rows], dtype=torch.long),
        word_counts=torch.tensor(
            [max(1, len(d.text.split())) for _, d in rows], dtype=torch.float32
        ),
        token_caps=torch.tensor(
            [int(caps.get(d.agent, default_cap)) for _, d in rows], dtype=torch.long
        ),
        proximal_log_probs=proximal,
        proximal_from_update=_proximal_from_update([d for _, d in rows]),
    )


def _proximal_from_update(decisions: Sequence[_Decision]) -> Tensor | None:
    """``(N,)`` bool: the decisions whose proximal log-probs are the update's own forward; None
    where none is."""
    marked = [bool(getattr(d, "proximal_from_update", False)) for d in decisions]
    return torch.tensor(marked, dtype=torch.bool) if any(marked) else None


def _proximal_log_probs(decisions: Sequence[_Decision], old: Tensor) -> Tensor | None:
    """``(N, T)`` proximal log-probs where some decision carries them (the others' are their
    rollout log-probs: fresh decisions are sampled by the proximal policy); None where none does."""
    given = [getattr(d, "proximal_log_probs", None) for d in decisions]
    if all(p is None for p in given):
        return None
    out = old.clone()
    for k, (d, p) in enumerate(zip(decisions, given, strict=True)):
        if p is None:
            continue
        if len(p) != len(d.action_ids):
            raise ValueError(
                f"Decision {k} of agent {d.agent!r} has {len(d.action_ids)} tokens but "
                f"{len(p)} proximal log-probs."
            )
        out[k, : len(p)] = torch.as_tensor(p, dtype=torch.float32)
    return out
