"""The one policy-gradient step every trainer takes: clipped surrogate, entropy, KL, accumulation.

Actor-critic trainers (action- and token-level MARFT, PPO) and GRPO differ in where advantages come
from; the step on the policy is the same. Given a :class:`~marft_algos.common.batch.RolloutBatch`
with advantages, :meth:`PolicyGradient.backward` recomputes each agent's log-probs under the
distribution the rollout sampled from (same temperature, top-k, top-p), and back-propagates

    Σ_entries w·ℓ_clip  +  β·Σ_tokens w·k3  −  c_H·Σ_tokens w·H

where k3 compares the policy with the reference model, both under the sampling temperature alone
(no top-k/top-p cut on either side, as in TRL: finite for every sampled token and exactly 0 while
the policy is the reference, see ``docs/maths.md``) and the weights ``w`` come from the whole batch (:func:`~marft_algos.common.losses.sequence_weights`):
however the batch is split into accumulation chunks and agents, the gradient is the same.

Granularity is an :class:`Objective` chosen once:

- ``level="action"``: one entry per decision, the action's log-prob (paper eq. 6, optional
  token/word normalisation), each decision weighted ``1/N``; the entropy bonus is each action's
  mean token entropy, averaged over decisions (the same ``1/N``).
- ``level="token"``: one entry per token, weighted by ``normalizer`` (``"token"``: every token of
  the batch counts once; ``"sequence"``; ``"constant"``: Dr. GRPO).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from marft_algos.common.batch import RolloutBatch
from marft_algos.common.behaviour_weights import BEHAVIOUR_WEIGHT_CAP, BehaviourWeightMode
from marft_algos.common.log_probs import action_log_prob, kl_k3
from marft_algos.common.losses import (
    ImportanceSamplingLevel,
    Normalizer,
    clipped_surrogate,
    sequence_weights,
)
from marft_algos.distributed import DistributedContext
from marft_algos.protocols import PolicyLike, TokenLogProbsLike

__all__ = ["Objective", "PolicyGradient"]

_STATS = ("approx_kl", "clip_fraction", "ratio_mean")
#: Sums kept per agent: the per-agent statistics of a step (``train/<name>/<agent>``).
_AGENT_SUMS = ("policy_loss", "entropy", "weight", "entries", *_STATS)


@dataclass(frozen=True)
class Objective:
    """What the policy step minimises.

    Attributes:
        level: One PPO ratio per action (``"action"``) or per token (``"token"``).
        normalizer: Token-level weighting (see :func:`~marft_algos.common.losses.sequence_weights`);
            action level always averages over decisions.
        epsilon: Clip range ε (ε_low).
        epsilon_high: Upper clip range (None: ε).
        entropy_coef: Entropy bonus weight.
        beta: Weight of the k3 KL to the reference policy (adapters off); 0 skips its forward.
        logprob_normalization: Action level: divide the action log-prob by its token or word count.
        behaviour_weight_cap: Stale decisions, or an engine's (a batch with proximal
            log-probs): bound of the decoupled objective's importance weight π_prox/π_behav.
        behaviour_weight_mode: How that weight is formed and bounded
            (:func:`~marft_algos.common.behaviour_weights.behaviour_weights`).
        importance_sampling_level: Token level: one ratio per token (``"token"``) or one per
            sequence, the geometric mean of its tokens' (``"sequence"``, GSPO).
    """

    level: Literal["action", "token"] = "token"
    normalizer: Normalizer = "token"
    epsilon: float = 0.2
    epsilon_high: float | None = None
    entropy_coef: float = 0.0
    beta: float = 0.0
    logprob_normalization: Literal["none", "token", "word"] = "none"
    behaviour_weight_cap: float = BEHAVIOUR_WEIGHT_CAP
    behaviour_weight_mode: BehaviourWeightMode = "token_truncate"
    importance_sampling_level: ImportanceSamplingLevel = "token"


class PolicyGradient:
    """Back-propagates an :class:`Objective` over a rollout batch, chunk by chunk and agent by agent.

    Args:
        policy: The multi-agent policy (``token_log_probs(agent, prompts, actions, ...)``).
        objective: The loss.
        sampling: The rollout's ``temperature``, ``top_k`` and ``top_p``: log-probs are recomputed
            under the distribution that was sampled.
        accumulation_steps: Chunks each agent's share of a batch is split into (bounds memory).
        max_chunk_tokens: Most padded tokens per chunk; more chunks where a share would pass it.
        distributed: Data-parallel context: weights use the global batch's counts, gradients and
            statistics are summed over ranks (default: one process).
    """

    def __init__(
        self,
        policy: PolicyLike,
        objective: Objective,
        *,
        sampling: Mapping[str, Any],
        accumulation_steps: int = 1,
        max_chunk_tokens: int | None = None,
        distributed: DistributedContext | None = None,
    ) -> None:
        self.policy = policy
        self.objective = objective
        self.sampling = dict(sampling)
        self.accumulation_steps = accumulation_steps
        self.max_chunk_tokens = max_chunk_tokens
        self.dist = distributed or DistributedContext()

    def parameters(self, agents: Sequence[str]) -> list[torch.nn.Parameter]:
        """The adapters' parameters of ``agents``, each once, in a fixed order."""
        seen: dict[int, torch.nn.Parameter] = {}
        for agent in agents:
            for p in self.policy.trainable_parameters(agent):
                seen.setdefault(id(p), p)
        return list(seen.values())

    @property
    def cuts(self) -> bool:
        """Whether the sampled distribution is cut (top-k or top-p): its log-probs then differ
        from the temperature-only ones that the KL terms to the reference compare."""
        top_k = self.sampling.get("top_k") or 0
        top_p = self.sampling.get("top_p")
        return bool(top_k) or (top_p is not None and float(top_p) < 1.0)

    def _log_probs(
        self, agent: str, chunk: RolloutBatch, *, with_entropy: bool, with_uncut: bool = False
    ) -> tuple[TokenLogProbsLike, Tensor | None]:
        """The sampled distribution's log-probs and, with ``with_uncut``, the temperature-only
        ones (the same tensor when nothing is cut), from one forward pass."""
        # Without an entropy bonus the entropy is only logged: no autograd through it.
        settings: dict[str, Any] = {
            "with_entropy": with_entropy,
            "differentiable_entropy": self.objective.entropy_coef != 0,
            **self.sampling,
        }
        prompts, actions = list(chunk.prompt_ids), chunk.action_lists()
        if with_uncut and self.cuts:
            return self.policy.token_log_probs_with_uncut(agent, prompts, actions, **settings)
        lp = self.policy.token_log_probs(agent, prompts, actions, **settings)
        return lp, (lp.log_probs if with_uncut else None)

    @torch.no_grad()
    def _uncut_log_probs(
        self, agent: str, chunk: RolloutBatch, *, reference: bool
    ) -> TokenLogProbsLike:
        """Log-probs under the sampling temperature alone: the reference model's (adapters off)
        or the current policy's."""
        return self.policy.token_log_probs(
            agent,
            list(chunk.prompt_ids),
            chunk.action_lists(),
            reference=reference,
            temperature=self.sampling.get("temperature"),
        )

    def _reference_kl(
        self, agent: str, chunk: RolloutBatch, log_probs: Tensor, mask: Tensor, weights: Tensor
    ) -> Tensor:
        """β's term ``Σ w·k3(π_θ, π_ref)`` over the tokens of ``chunk``, finite by construction.

        Both sides are under the sampling temperature alone, without the top-k/top-p cut
        (TRL's convention): ``log_probs`` are the policy's uncut log-probs, π_ref is the base
        model. Their support is the whole vocabulary, so both are finite for every sampled token,
        and the term is exactly 0 while the policy equals the reference (a cut policy side would
        add −log Z_t, Z_t the mass the cut keeps). Non-finite entries (none in practice) are left
        out with a finite gradient.
        """
        ref = self._uncut_log_probs(agent, chunk, reference=True).log_probs  # (B, T)
        keep = mask & torch.isfinite(log_probs)
        safe = torch.where(keep, log_probs, ref)  # k3(ref, ref) = 0 off `keep`
        per_token = torch.where(keep, kl_k3(safe, ref), torch.zeros_like(ref))
        return (per_token * weights).sum()

    def _entries(self, log_probs: Tensor, mask: Tensor, chunk: RolloutBatch, weights: Tensor):
        """The surrogate's entries: ``(new, old, advantages, mask, entry weights, proximal)``,
        ``proximal`` None unless the chunk holds stale decisions (those marked
        ``proximal_from_update`` take this forward's log-probs, detached)."""
        o = self.objective
        device = log_probs.device
        width = mask.shape[1]
        old = chunk.old_log_probs[:, :width].to(device)
        prox = chunk.proximal_log_probs
        prox = None if prox is None else prox[:, :width].to(device)
        if chunk.proximal_from_update is not None:
            # One optimizer step per agent: this forward runs on the proximal weights.
            own = chunk.proximal_from_update.to(device).unsqueeze(-1)  # (B, 1)
            prox = torch.where(own, log_probs.detach(), old if prox is None else prox)
        assert chunk.advantages is not None
        adv = chunk.advantages.to(device)
        if o.level == "action":
            words = chunk.word_counts.to(device)
            norm = o.logprob_normalization
            new = action_log_prob(log_probs, mask, norm, words)  # (B,)
            old_a = action_log_prob(old, mask, norm, words)  # (B,)
            prox_a = None if prox is None else action_log_prob(prox, mask, norm, words)
            return new, old_a, adv.reshape(-1), None, weights.sum(-1, keepdim=True), prox_a
        if adv.dim() == 2:
            adv = adv[:, :width]
        return log_probs, old, adv, mask, weights, prox

    def _surrogate(self, new: Tensor, old: Tensor, adv: Tensor, mask: Tensor | None, prox):
        """The per-entry surrogate; ``prox`` None (fresh decisions) is the plain one, which uses
        no behaviour weight."""
        o = self.objective
        return clipped_surrogate(
            new,
            old,
            adv,
            mask,
            epsilon=o.epsilon,
            epsilon_high=o.epsilon_high,
            proximal_log_probs=prox,
            behaviour_weight_cap=o.behaviour_weight_cap,
            behaviour_weight_mode=o.behaviour_weight_mode,
            importance_sampling_level=o.importance_sampling_level,
        )

    def _weights(self, chunk: RolloutBatch, mask: Tensor, totals: tuple[float, float]) -> Tensor:
        normalizer = "sequence" if self.objective.level == "action" else self.objective.normalizer
        return sequence_weights(
            mask,
            normalizer,
            total_tokens=totals[0],
            total_sequences=totals[1],
            caps=chunk.token_caps.to(mask.device),
        )

    def backward(
        self,
        batch: RolloutBatch,
        *,
        active: Tensor | None = None,
        agents: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Back-propagate the objective of ``batch`` into the agents' adapters (no optimizer step).

        Args:
            batch: Decisions with advantages; every agent in it is differentiated.
            active: ``(N,)`` bool: forward only these decisions (others contribute exactly 0,
                e.g. zero-advantage GRPO rows without entropy or KL terms). The weights still
                count every decision of ``batch``, and an agent whose decisions are all inactive
                gets a zero gradient, so that its optimizer steps as if they had run.
            agents: With several processes: the agents whose gradients are summed over ranks
                (the same list, in the same order, on every rank; default: every agent of the
                policy).

        Returns:
            ``loss`` (the objective's value), ``policy_loss`` and ``kl`` (their terms of it), and
            the statistics ``entropy`` (weighted as in the objective), ``approx_kl``,
            ``clip_fraction``, ``ratio_mean`` (means over the entries processed: decisions at
            action level, tokens at token level); ``per_agent``: the same statistics of each
            agent's own entries (``policy_loss`` as its weighted mean), ``grad_norms``: each
            adapter's gradient norm (:meth:`adapter_grad_norms`), and, where rows are marked
            ``proximal_from_update``, ``proximal_log_probs``: ``(N, T)`` the batch's proximal
            log-probs with those rows' taken from this forward (what the step is measured against
            afterwards, :meth:`~RolloutBatch.with_proximal`).
        """
        o = self.objective
        tokens, sequences = self.dist.sum([float(batch.action_mask.sum()), float(len(batch))])
        totals = (tokens, sequences)
        keep = torch.ones(len(batch), dtype=torch.bool) if active is None else active.bool()
        out: dict[str, float] = {"loss": 0.0, "kl": 0.0}
        own = {a: dict.fromkeys(_AGENT_SUMS, 0.0) for a in self.policy.agents}
        marked = batch.proximal_from_update
        proximal = None  # (N, T), where rows take their proximal log-probs from this forward
        if marked is not None:
            given = batch.proximal_log_probs
            proximal = (batch.old_log_probs if given is None else given).clone()
        plan: dict[str, list[Any]] = {}
        for agent in dict.fromkeys(batch.agents):
            rows = [k for k in batch.indices_of(agent) if bool(keep[k])]
            if not rows:
                # Every row of the agent inactive (its terms are exactly 0): a zero gradient, so
                # its optimizer steps as it would have on those rows (Adam's momentum moves it).
                for p in self.policy.trainable_parameters(agent):
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                continue
            plan[agent] = list(
                batch.split_rows(rows, self.accumulation_steps, self.max_chunk_tokens)
            )
        for agent, part in self.dist.lockstep(plan, self.policy.agents):
            if part is None:
                self._filler(agent, backward=True, reference=o.beta > 0)
                continue
            chunk = batch[part]
            lp, uncut = self._log_probs(agent, chunk, with_entropy=True, with_uncut=o.beta > 0)
            mask = lp.mask
            if proximal is not None:
                assert marked is not None
                own_rows = torch.as_tensor(part)[marked[part]]
                taken = lp.log_probs.detach()[marked[part]].float().cpu()
                proximal[own_rows, : mask.shape[1]] = torch.where(
                    mask[marked[part]].cpu(), taken, 0.0
                )
            weights = self._weights(chunk, mask, totals)  # (B, T)
            new, old, adv, entry_mask, entry_w, prox = self._entries(
                lp.log_probs, mask, chunk, weights
            )
            per_entry, terms = self._surrogate(new, old, adv, entry_mask, prox)
            policy_loss = (per_entry * entry_w).sum()
            assert lp.entropy is not None  # requested above
            entropy = (lp.entropy * weights).sum()
            objective = policy_loss - o.entropy_coef * entropy if o.entropy_coef else policy_loss
            if o.beta > 0:
                assert uncut is not None  # requested above
                kl = self._reference_kl(agent, chunk, uncut, mask, weights)
                objective = objective + o.beta * kl
                out["kl"] += float(kl.detach())
            if torch.isfinite(objective):
                objective.backward()
            elif self.dist.sharded:  # every rank runs its backward pass: a 0 one here
                _zero_backward(lp.log_probs)
            out["loss"] += float(objective.detach())
            m = terms["mask"]
            mine = own[agent]  # the pooled sums are the agents' sums added up, below
            mine["policy_loss"] += float(policy_loss.detach())
            mine["entropy"] += float(entropy.detach())
            mine["weight"] += float(weights.sum())
            mine["entries"] += float(m.sum())
            for name in _STATS:
                mine[name] += float(
                    torch.where(m, terms[name], torch.zeros_like(terms[name])).sum()
                )
        if self.dist.enabled:
            self.dist.sum_gradients(
                self.parameters(self.policy.agents if agents is None else agents)
            )
            flat = [v for a in self.policy.agents for v in own[a].values()]
            reduced = self.dist.sum([*out.values(), *flat])
            out = dict(zip(out, reduced[: len(out)], strict=True))
            rest = iter(reduced[len(out) :])
            own = {a: {k: next(rest) for k in _AGENT_SUMS} for a in self.policy.agents}
        sums = {key: sum(own[a][key] for a in own) for key in _AGENT_SUMS}
        out["policy_loss"] = sums["policy_loss"]
        out["entropy"] = sums["entropy"] / sums["weight"] if sums["weight"] else 0.0
        for name in _STATS:
            out[name] = sums[name] / sums["entries"] if sums["entries"] else 0.0
        result: dict[str, Any] = dict(out)
        result["per_agent"] = {
            a: {
                "policy_loss": s["policy_loss"] / s["weight"] if s["weight"] else 0.0,
                "entropy": s["entropy"] / s["weight"] if s["weight"] else 0.0,
                **{name: s[name] / s["entries"] for name in _STATS},
            }
            for a, s in own.items()
            if s["entries"]
        }
        result["grad_norms"] = self.adapter_grad_norms(list(dict.fromkeys(batch.agents)))
        if proximal is not None:
            result["proximal_log_probs"] = proximal
        return result

    @torch.no_grad()
    def adapter_grad_norms(self, agents: Sequence[str]) -> dict[str, float]:
        """The gradient norm of each adapter that ``agents`` train, before clipping, named by its
        agent, or its agents joined by ``+`` for an adapter they share (e.g. ``critic+planner``)."""
        groups: dict[tuple[int, ...], list[str]] = {}
        for agent in self.policy.agents:
            params = self.policy.trainable_parameters(agent)
            if params:
                groups.setdefault(tuple(id(p) for p in params), []).append(agent)
        norms: dict[str, float] = {}
        for members in groups.values():
            if not set(members) & set(agents):
                continue
            grads = [p.grad for p in self.policy.trainable_parameters(members[0])]
            each = [torch.linalg.vector_norm(g.detach().float()) for g in grads if g is not None]
            total = torch.linalg.vector_norm(torch.stack(each)) if each else torch.zeros(())
            norms["+".join(sorted(members))] = float(total)  # one device sync per adapter
        return norms

    @torch.no_grad()
    def reference_log_probs(self, batch: RolloutBatch) -> Tensor:
        """``(N, T)`` log-probs of the batch's tokens under the reference policy (adapters off),
        for a KL penalty folded into the reward (RLOO, REINFORCE++); 0 on padding.

        The reference distribution is the base model's at the rollout temperature, without the
        top-k / top-p cut (TRL's convention): a sampled token outside the reference's own cut
        would get log-prob −inf and an infinite penalty, so the penalty is finite by construction.
        Compare it with :meth:`penalty_log_probs`, the policy's side under the same convention.
        Forwards run agent by agent in ``accumulation_steps`` chunks, as the update's do.
        """
        return self._batch_uncut_log_probs(batch, reference=True)

    @torch.no_grad()
    def penalty_log_probs(self, batch: RolloutBatch) -> Tensor:
        """``(N, T)`` the policy's side of a KL penalty in the reward: log π_old of the batch's
        tokens under the rollout temperature alone, as :meth:`reference_log_probs`; 0 on padding.

        Without a top-k/top-p cut these are the recorded rollout log-probs. With one, the
        recorded log-probs are of the cut distribution (−log Z_t more than the uncut ones, Z_t the
        mass the cut keeps), so they are recomputed uncut under the current weights, which are
        the rollout's before the update's first step. Either way the penalty is 0 while the
        policy equals the reference.
        """
        if not self.cuts:
            return batch.old_log_probs
        return self._batch_uncut_log_probs(batch, reference=False)

    def _row_parts(self, batch: RolloutBatch) -> dict[str, list[Any]]:
        """Each agent's rows of ``batch`` split into the update's chunks."""
        return {
            agent: list(
                batch.split_rows(
                    batch.indices_of(agent), self.accumulation_steps, self.max_chunk_tokens
                )
            )
            for agent in dict.fromkeys(batch.agents)
        }

    def _batch_uncut_log_probs(self, batch: RolloutBatch, *, reference: bool) -> Tensor:
        out = torch.zeros_like(batch.old_log_probs)  # (N, T)
        for agent, part in self.dist.lockstep(self._row_parts(batch), self.policy.agents):
            if part is None:
                self._filler(agent)
                continue
            lp = self._uncut_log_probs(agent, batch[part], reference=reference)
            width = lp.mask.shape[1]
            kept = torch.where(lp.mask, lp.log_probs, torch.zeros_like(lp.log_probs))
            out[torch.as_tensor(part), :width] = kept.float().cpu()
        return out

    def _filler(self, agent: str, *, backward: bool = False, reference: bool = False) -> None:
        """Under ``--fsdp``, a pass over one token standing for a chunk this rank lacks: the same
        forward passes as a chunk (and backward, with ``backward``), whose loss counts 0."""
        lp = self.policy.token_log_probs(agent, [[0]], [[0]])
        if backward and lp.log_probs.requires_grad:
            _zero_backward(lp.log_probs)
        if reference:
            with torch.no_grad():
                self.policy.token_log_probs(agent, [[0]], [[0]], reference=True)

    @torch.no_grad()
    def current_log_probs(self, batch: RolloutBatch) -> Tensor:
        """``(N, T)`` log-probs of the batch's tokens under the current weights and the
        distribution the rollout sampled from (the proximal log-probs of stale decisions); 0 on
        padding. Forwards run agent by agent in ``accumulation_steps`` chunks."""
        out = torch.zeros_like(batch.old_log_probs)  # (N, T)
        for agent, part in self.dist.lockstep(self._row_parts(batch), self.policy.agents):
            if part is None:
                self._filler(agent)
                continue
            lp, _ = self._log_probs(agent, batch[part], with_entropy=False)
            width = lp.mask.shape[1]
            kept = torch.where(lp.mask, lp.log_probs, torch.zeros_like(lp.log_probs))
            out[torch.as_tensor(part), :width] = kept.float().cpu()
        return out

    @torch.no_grad()
    def approx_kl(self, batch: RolloutBatch) -> float:
        """k3 estimate of KL(π_old ‖ π_θ) on the batch's entries under the current weights
        (π_old: the proximal policy where the batch has stale decisions)."""
        total, count = 0.0, 0
        for agent, part in self.dist.lockstep(self._row_parts(batch), self.policy.agents):
            if part is None:
                self._filler(agent)
                continue
            chunk = batch[part]
            lp, _ = self._log_probs(agent, chunk, with_entropy=False)
            weights = self._weights(chunk, lp.mask, (1.0, 1.0))
            new, old, adv, entry_mask, _, prox = self._entries(
                lp.log_probs, lp.mask, chunk, weights
            )
            _, terms = self._surrogate(new, old, adv, entry_mask, prox)
            m = terms["mask"]
            total += float(
                torch.where(m, terms["approx_kl"], torch.zeros_like(terms["approx_kl"])).sum()
            )
            count += int(m.sum())
        total, entries = self.dist.sum([total, float(count)])
        return total / entries if entries else 0.0


def _zero_backward(log_probs: Tensor) -> None:
    """Back-propagate 0 through ``log_probs``' forward pass (its finite entries): under
    ``--fsdp`` every rank runs each backward pass, whether or not its loss counts."""
    (torch.where(torch.isfinite(log_probs), log_probs, 0.0).sum() * 0.0).backward()
