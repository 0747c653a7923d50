"""Critic: a frozen transformer backbone plus a small trainable MLP value head (paper §4.2.1).

By default the backbone is the policy's own base model with all adapters disabled, so the critic
adds only the head (``hidden_size x 64 + 64 + 64 + 1`` parameters) to memory. Optionally the critic
gets its own LoRA adapter on that backbone (``lora=LoraSettings(...)``), trained with the head.

Values are read from the backbone's last hidden state (after the final norm):

- **action-level** (:meth:`Critic.action_values`): one value per rollout observation, ``V(ô)``, at
  the last prompt token;
- **token-level** (:meth:`Critic.token_values`): one value per action token, ``V(s_t)`` where
  ``s_t`` is the prompt followed by the first ``t`` action tokens, i.e. the state *before* token
  ``t`` is generated (hidden states at columns ``P-1 ... P+T-2`` of the packed layout, see
  :mod:`marft_algos.policy.forward`). ``token_values(..., include_final=True)`` adds ``V(s_L)``, the
  state after the whole action, at index ``L`` (the action's length). Token-level MARFT does not
  need it (the last token of agent i bootstraps from agent i+1's first state, which is that
  agent's action value), but single-agent multi-turn tasks may.

Index 0 of :meth:`Critic.token_values` equals :meth:`Critic.action_values` for the same prompt.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from marft_algos.policy.backbone import Backbone, load_backbone
from marft_algos.policy.config import LoraSettings
from marft_algos.policy.forward import decoder_hidden_states, full_attention_only, pack
from marft_algos.policy.prefix_cache import weights_fingerprint

if TYPE_CHECKING:
    from marft_algos.policy.multi_agent import MultiAgentPolicy

__all__ = ["Critic", "ValueHead"]


class ValueHead(nn.Module):
    """MLP on a hidden state: ``Linear(d, hidden) -> ReLU -> Linear(hidden, 1)``.

    Args:
        input_size: Backbone hidden size ``d``.
        hidden: Width of the hidden layer (paper default 64).
    """

    def __init__(self, input_size: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(input_size, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        out = self.net[2]
        assert isinstance(out, nn.Linear)
        # Small output weights: initial values near 0 keep the first value-loss gradients tame.
        nn.init.normal_(out.weight, std=0.01)
        nn.init.zeros_(out.bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(..., d)`` hidden states to ``(...)`` values."""
        return self.net(hidden_states).squeeze(-1)


#: Distinct observations prefilled together when a frozen critic computes their features.
FEATURE_BATCH = 64
#: Most observations whose features (last hidden state) a frozen critic keeps.
FEATURE_CACHE_SIZE = 65536


class Critic:
    """Frozen backbone + trainable value head (+ optional LoRA adapter on the backbone).

    Args:
        backbone: A :class:`~marft_algos.policy.MultiAgentPolicy` (use one of its base models,
            adapters disabled), a :class:`~marft_algos.policy.backbone.Backbone`, or a model name
            or path (loaded separately and frozen).
        model: With a policy, which of its base models to use (default: the first agent's).
        hidden: Width of the value head's hidden layer.
        lora: Give the critic its own trainable LoRA adapter on the backbone.
        adapter_name: Name of that adapter.
        device: Device of a backbone loaded from a name (default CPU).
        seed: Seed of the head (and LoRA) initialisation; the global RNG is left untouched.
    """

    share_prompts: bool = True
    """Action values from each distinct observation's last hidden state, computed once under the
    base weights and kept (:meth:`action_values`; a frozen backbone with full attention only).
    False: every row's padded prompt at every pass. Same values up to float round-off."""

    def __init__(
        self,
        backbone: MultiAgentPolicy | Backbone | str,
        *,
        model: str | None = None,
        hidden: int = 64,
        lora: LoraSettings | None = None,
        adapter_name: str = "critic",
        device: torch.device | str | None = None,
        seed: int | None = None,
    ) -> None:
        self.backbone = _resolve_backbone(backbone, model, device)
        self.adapter = adapter_name if lora is not None else None
        if lora is not None:
            self.backbone.add_adapter(adapter_name, lora, trainable=True, seed=seed)
        config = _config(self.backbone.model)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.head = ValueHead(config.hidden_size, hidden)
        if self.backbone.device.type != "meta":  # an empty base (fsdp) keeps the head on the host
            self.head.to(self.backbone.device)
        self.hidden = hidden
        # Last hidden states of observations under the base weights (action_values).
        self._features: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()
        self._features_of: Any = None

    # ------------------------------------------------------------------ parameters
    def parameters(self) -> list[nn.Parameter]:
        """Trainable parameters: the head, plus the critic's LoRA adapter if it has one."""
        params = list(self.head.parameters())
        if self.adapter is not None:
            params += self.backbone.adapter_parameters(self.adapter)
        return params

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """``(name, parameter)`` of :meth:`parameters` (``head.*`` and ``lora.*``)."""
        for name, p in self.head.named_parameters():
            yield f"head.{name}", p
        if self.adapter is not None:
            for name, p in self.backbone.named_adapter_parameters(self.adapter):
                yield f"lora.{name}", p

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Head weights (and critic LoRA weights), detached copies keyed like :meth:`named_parameters`."""
        return {name: p.detach().clone() for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load weights saved by :meth:`state_dict`; every key must match."""
        own = dict(self.named_parameters())
        if set(own) != set(state):
            missing, extra = sorted(set(own) - set(state))[:5], sorted(set(state) - set(own))[:5]
            raise ValueError(
                f"Critic state does not match this critic (hidden size, LoRA settings?): missing "
                f"{missing}, unexpected {extra}."
            )
        with torch.no_grad():
            for name, p in own.items():
                if p.shape != state[name].shape:
                    raise ValueError(
                        f"Critic weight {name!r} has shape {tuple(state[name].shape)}, expected "
                        f"{tuple(p.shape)}."
                    )
                p.copy_(state[name].to(p.device, p.dtype))

    # ------------------------------------------------------------------ values
    def _hidden(
        self, prompt_ids: Sequence[Sequence[int]], action_ids: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, Any]:
        batch = pack(prompt_ids, action_ids, self.backbone.pad_id, self.backbone.device)
        grad = torch.is_grad_enabled() and self.adapter is not None
        # A frozen backbone needs no graph: the value loss only trains the head.
        with torch.set_grad_enabled(grad), self.backbone.using(self.adapter) as model:
            hidden = decoder_hidden_states(model, batch)  # (batch, P + T, d)
        return hidden.to(next(self.head.parameters()).dtype), batch

    def action_values(self, prompt_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """Action-level values ``V(ô)``, one per observation, at the last prompt token.

        With a frozen backbone (no critic adapter) an observation's last hidden state depends on
        the base weights alone, which training never changes: each distinct prompt runs once
        (prompts that begin alike share their beginning, as in
        :func:`~marft_algos.policy.kv_cache.prompt_caches`) and its hidden state is kept for
        every later pass (the update's value targets, each epoch's value loss), until the base
        weights change (their fingerprint, :func:`~marft_algos.policy.prefix_cache.weights_fingerprint`).

        Args:
            prompt_ids: Rendered prompt token ids per observation.

        Returns:
            ``(batch,)`` values.
        """
        if self.adapter is None and self.share_prompts:
            features = self._prompt_features(prompt_ids)
            if features is not None:
                return self.head(features.to(next(self.head.parameters()).dtype))  # (batch,)
        hidden, batch = self._hidden(prompt_ids, [[] for _ in prompt_ids])
        return self.head(hidden[:, batch.prompt_width - 1])  # (batch,)

    def forget_prompts(self) -> None:
        """Drop the kept observation features (:meth:`action_values`)."""
        self._features.clear()
        self._features_of = None

    def _prompt_features(self, prompt_ids: Sequence[Sequence[int]]) -> torch.Tensor | None:
        """``(batch, d)`` last hidden states of the prompts under the base weights, each distinct
        prompt computed once and kept; None where the weights cannot be fingerprinted."""
        from marft_algos.policy.kv_cache import prompt_caches

        model = self.backbone.model
        fingerprint = weights_fingerprint(model, base_only=True)
        if fingerprint is None or not full_attention_only(model.config):
            return None
        if fingerprint != self._features_of:
            self._features.clear()
            self._features_of = fingerprint
        keys = [tuple(int(t) for t in p) for p in prompt_ids]
        missing = list(dict.fromkeys(k for k in keys if k not in self._features))
        for start in range(0, len(missing), FEATURE_BATCH):
            chunk = missing[start : start + FEATURE_BATCH]
            with torch.no_grad(), self.backbone.using(None) as base:
                last = prompt_caches(base, [list(k) for k in chunk], hidden=True).last
            self._features.update(zip(chunk, last, strict=True))  # (d,) each
        for key in keys:
            self._features.move_to_end(key)
        features = torch.stack([self._features[k] for k in keys])  # (batch, d)
        while len(self._features) > FEATURE_CACHE_SIZE:
            self._features.popitem(last=False)
        return features

    def token_values(
        self,
        prompt_ids: Sequence[Sequence[int]],
        action_ids: Sequence[Sequence[int]],
        *,
        include_final: bool = False,
    ) -> torch.Tensor:
        """Token-level values: ``V`` of the state before each action token.

        Args:
            prompt_ids: Rendered prompt token ids per sample.
            action_ids: Action token ids per sample.
            include_final: Also return the value after the last action token, at index ``L_b``
                (so the output has one more column).

        Returns:
            ``(batch, T)`` values (``(batch, T + 1)`` with ``include_final``), ``T`` the longest
            action; entries past a row's action are 0.
        """
        hidden, batch = self._hidden(prompt_ids, action_ids)
        width = batch.action_ids.shape[1] + (1 if include_final else 0)
        start = batch.prompt_width - 1
        values = self.head(hidden[:, start : start + width])  # (batch, width)
        lengths = batch.action_mask.sum(-1, keepdim=True)  # (batch, 1)
        steps = torch.arange(width, device=values.device).unsqueeze(0)  # (1, width)
        valid = steps <= lengths if include_final else steps < lengths  # (batch, width)
        return values.masked_fill(~valid, 0.0)

    def to(self, device: torch.device | str) -> Critic:
        """Move the head (the backbone moves with its policy)."""
        self.head.to(device)
        return self


def _config(model: Any) -> Any:
    from marft_algos.policy.forward import unwrap_causal_lm

    return unwrap_causal_lm(model).config


def _resolve_backbone(
    source: Any, model: str | None, device: torch.device | str | None
) -> Backbone:
    if isinstance(source, Backbone):
        return source
    if isinstance(source, str):
        return load_backbone(source, device=device or "cpu")
    backbones = getattr(source, "backbones", None)
    if backbones is not None:
        name = model if model is not None else source.base_model_name(source.agents[0])
        if name not in backbones:
            raise ValueError(
                f"The policy has no base model {name!r}; its base models are {sorted(backbones)}."
            )
        return backbones[name]
    raise TypeError(
        f"Critic backbone must be a MultiAgentPolicy, a Backbone or a model name/path, got "
        f"{type(source).__name__}."
    )
