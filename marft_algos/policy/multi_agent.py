"""The multi-agent policy: which model and adapter each agent acts with, generation and log-probs.

Default configuration (DESIGN §3): one base causal LM and one LoRA adapter per agent (peft
multi-adapter), so memory stays about one model however many agents there are. Through
:class:`~marft_algos.policy.config.AgentSpec` agents can instead share an adapter (parameter
sharing), use different base models (heterogeneous teams with their own tokenizers and chat
templates), or act frozen (no optimizer ever sees their parameters).

**Token-in, token-out.** :meth:`MultiAgentPolicy.generate` returns the exact token ids each agent
sampled together with their log-probs; trainers feed those ids back into
:meth:`MultiAgentPolicy.token_log_probs` and never re-tokenise generated text.

**Log-prob convention.** A sampled token's log-prob is its log-probability under the distribution
it was actually sampled from: ``log softmax(sampling_logits(logits, temperature, top_k, top_p))``
in float32 (:func:`~marft_algos.policy.forward.sampling_logits`: the logits divided by the sampling
temperature, then cut by top-k and top-p exactly as transformers' sampler cuts them, as TRL does
for the temperature). The settings are stored on every :class:`Generation`; a trainer recomputes
log-probs with the same settings (:meth:`MultiAgentPolicy.token_log_probs`), so the PPO ratio is a
ratio of the sampling distributions. Greedy generations (evaluation) report
``log softmax(logits / policy temperature)``. Rollout log-probs are recorded while decoding
(:func:`~marft_algos.policy.decoding.decode`: the sampled token's log-prob under the processed
logits of its step; no second forward pass, no full-vocabulary scores kept). For unchanged weights
the update's log-probs equal the rollout's up to float round-off (KV cache, batch padding, the
merged adapter of :attr:`MultiAgentPolicy.merge_adapters_for_generation`), so the PPO ratio starts
at 1.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from marft_algos.policy.backbone import Backbone, load_backbone
from marft_algos.policy.config import AgentSpec, LoraSettings
from marft_algos.policy.generation import Generation, GenerationMixin
from marft_algos.policy.prefix_cache import (
    PrefillCounter,
    PrefixStore,
)
from marft_algos.policy.rendering import render_prompt_ids
from marft_algos.policy.scoring import ScoringMixin, TokenLogProbs

__all__ = ["Generation", "MultiAgentPolicy", "TokenLogProbs"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _AgentBinding:
    backbone: str
    adapter: str | None
    trainable: bool


class MultiAgentPolicy(GenerationMixin, ScoringMixin):
    """Maps every agent of a team to a base model and (optionally) a LoRA adapter.

    Build it with :meth:`from_pretrained`. Models stay in eval mode (dropout off) so that rollout
    and update forward passes are identical. Generation (:meth:`generate`) comes from
    :class:`~marft_algos.policy.generation.GenerationMixin`, log-probs (:meth:`token_log_probs`)
    from :class:`~marft_algos.policy.scoring.ScoringMixin`.

    Args:
        backbones: Loaded base models by name.
        bindings: Per agent, which backbone and adapter it uses and whether it trains.
        temperature: Default sampling temperature, and the temperature of greedy generations'
            and :meth:`token_log_probs`' log-probs when none is given.
    """

    def __init__(
        self,
        backbones: Mapping[str, Backbone],
        bindings: Mapping[str, _AgentBinding],
        *,
        temperature: float = 1.0,
    ) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        self._backbones = dict(backbones)
        self._bindings = dict(bindings)
        self.temperature = float(temperature)
        self.prefix_store = PrefixStore(self.prefix_store_tokens)
        #: Prompt tokens :meth:`generate` prefilled and saved; trainers read it per iteration.
        self.prefill = PrefillCounter()
        #: Prompt tokens :meth:`token_log_probs` ran and saved (every pass of an update).
        self.update_prefill = PrefillCounter()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path: str,
        agents: Sequence[str],
        *,
        specs: Mapping[str, AgentSpec] | None = None,
        lora: LoraSettings | None = None,
        torch_dtype: torch.dtype | str | None = None,
        device: torch.device | str = "cpu",
        temperature: float = 1.0,
        seed: int | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
    ) -> MultiAgentPolicy:
        """Load base model(s) and create the agents' adapters.

        Args:
            model_name_or_path: Default base model (Hub id or local folder) for agents whose spec
                names none.
            agents: Agent names, e.g. ``env.possible_agents``.
            specs: Per-agent :class:`AgentSpec`; agents left out get ``AgentSpec()`` (own
                trainable adapter on the default base).
            lora: Settings of every fresh adapter (default :class:`LoraSettings`).
            torch_dtype: Weight dtype; default bfloat16 on CUDA, float32 elsewhere (exact
                log-prob equality on CPU).
            device: Device for all models, e.g. ``"cpu"`` or ``"cuda:0"``.
            temperature: Log-prob convention temperature and default sampling temperature.
            seed: Seed of the fresh adapters' initialisation (global RNG left untouched).
            model_kwargs: Extra ``AutoModelForCausalLM.from_pretrained`` arguments.

        Returns:
            The policy.
        """
        agents = list(agents)
        if not agents:
            raise ValueError("agents is empty; pass the env's agent names (env.possible_agents).")
        if len(set(agents)) != len(agents):
            raise ValueError(f"Agent names must be unique, got {agents}.")
        specs = dict(specs or {})
        unknown = sorted(set(specs) - set(agents))
        if unknown:
            raise ValueError(f"specs name unknown agents {unknown}; the agents are {agents}.")
        lora = lora or LoraSettings()

        bindings: dict[str, _AgentBinding] = {}
        # adapter name -> (backbone, trainable, path, first agent) to detect conflicting specs.
        adapters: dict[str, tuple[str, bool, str | None, str]] = {}
        for agent in agents:
            spec = specs.get(agent, AgentSpec())
            model = str(spec.model or model_name_or_path)
            name = spec.adapter_name(agent)
            if name is not None:
                seen = adapters.get(name)
                if seen is None:
                    adapters[name] = (model, spec.trainable, spec.adapter_path, agent)
                elif seen[:3] != (model, spec.trainable, spec.adapter_path):
                    raise ValueError(
                        f"Agents {seen[3]!r} and {agent!r} share adapter {name!r} but their specs "
                        f"differ (base model, trainable, adapter_path): {seen[:3]} vs "
                        f"{(model, spec.trainable, spec.adapter_path)}. A shared adapter is one set "
                        f"of parameters on one base model; give the agents the same spec or "
                        f"different adapter names."
                    )
            bindings[agent] = _AgentBinding(model, name, spec.trainable)

        backbones: dict[str, Backbone] = {}
        for binding in bindings.values():
            if binding.backbone not in backbones:
                backbones[binding.backbone] = load_backbone(
                    binding.backbone,
                    dtype=torch_dtype,
                    device=device,
                    model_kwargs=dict(model_kwargs or {}),
                )
        for i, (name, (model, trainable, path, _)) in enumerate(adapters.items()):
            backbones[model].add_adapter(
                name,
                lora,
                trainable=trainable,
                path=path,
                seed=None if seed is None else seed + i,
            )
        return cls(backbones, bindings, temperature=temperature)

    @classmethod
    def from_layout(
        cls,
        layout: Mapping[str, Any],
        *,
        model: str | None = None,
        device: torch.device | str = "cpu",
        torch_dtype: torch.dtype | str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
    ) -> MultiAgentPolicy:
        """A policy with the agents, base models, adapters and LoRA settings that
        :func:`~marft_algos.policy.adapters.policy_layout` described (fresh adapter weights: load
        the trained ones with :meth:`load_adapters`, or use
        :func:`marft_algos.runs.checkpoint.policy_from_checkpoint` for a checkpoint).

        Args:
            layout: ``policy_layout(policy)``, e.g. a checkpoint's manifest or ``policy.json``.
            model: Replace every recorded base model (e.g. the same model at a new path).
            device: Device for the models.
            torch_dtype: Weight dtype (default bfloat16 on CUDA, float32 elsewhere).
            model_kwargs: Extra ``AutoModelForCausalLM.from_pretrained`` arguments.

        Raises:
            ValueError: The adapters have different LoRA settings (build the policy with
                ``from_pretrained(specs=...)`` instead).
        """
        agents = list(layout["agents"])
        lora_by_adapter = layout.get("lora") or {}
        settings = {
            (s["r"], s["alpha"], s["dropout"], json.dumps(s["target_modules"]))
            for s in lora_by_adapter.values()
        }
        if len(settings) > 1:
            raise ValueError(
                f"the adapters have different LoRA settings {sorted(lora_by_adapter.items())}; "
                f"build the policy yourself with MultiAgentPolicy.from_pretrained(specs=...) and "
                f"load its weights."
            )
        lora = LoraSettings()
        if settings:
            r, alpha, dropout, targets = settings.pop()
            lora = LoraSettings(
                r=r, alpha=alpha, dropout=dropout, target_modules=json.loads(targets)
            )
        specs = {
            a: AgentSpec(
                model=model or layout["base_models"][a],
                adapter=layout["adapters"][a],
                trainable=bool(layout["trainable"][a]),
            )
            for a in agents
        }
        default = model or layout["base_models"][agents[0]]
        return cls.from_pretrained(
            default,
            agents,
            specs=specs,
            lora=lora,
            device=device,
            torch_dtype=torch_dtype,
            model_kwargs=model_kwargs,
        )

    # ------------------------------------------------------------------ introspection
    @property
    def agents(self) -> list[str]:
        """Agent names, in construction order."""
        return list(self._bindings)

    def _binding(self, agent: str) -> _AgentBinding:
        try:
            return self._bindings[agent]
        except KeyError:
            raise KeyError(
                f"Unknown agent {agent!r}; the policy's agents are {self.agents}."
            ) from None

    def backbone(self, agent: str) -> Backbone:
        """The :class:`Backbone` (base model, tokenizer, adapters) an agent acts on."""
        return self._backbones[self._binding(agent).backbone]

    @property
    def backbones(self) -> dict[str, Backbone]:
        """All loaded base models by name."""
        return dict(self._backbones)

    def tokenizer(self, agent: str) -> Any:
        """The tokenizer of an agent's base model."""
        return self.backbone(agent).tokenizer

    def model(self, agent: str) -> Any:
        """The (peft-wrapped) model an agent acts with; use :meth:`acting` to switch adapters."""
        return self.backbone(agent).model

    def base_model_name(self, agent: str) -> str:
        """Name or path of the base model an agent acts with."""
        return self._binding(agent).backbone

    def adapter_name(self, agent: str) -> str | None:
        """The agent's adapter name (shared adapters have one name), or None for the plain base."""
        return self._binding(agent).adapter

    def is_trainable(self, agent: str) -> bool:
        """Whether the agent trains (has a trainable adapter)."""
        b = self._binding(agent)
        return b.trainable and b.adapter is not None

    def trainable_parameters(self, agent: str) -> list[torch.nn.Parameter]:
        """The agent's adapter parameters for its optimizer; ``[]`` for a frozen agent.

        Agents sharing an adapter return the same parameter objects.
        """
        b = self._binding(agent)
        if not b.trainable or b.adapter is None:
            return []
        return self._backbones[b.backbone].adapter_parameters(b.adapter)

    def parameters(self) -> list[torch.nn.Parameter]:
        """All trainable adapter parameters of all agents, each once."""
        seen: dict[int, torch.nn.Parameter] = {}
        for agent in self.agents:
            for p in self.trainable_parameters(agent):
                seen.setdefault(id(p), p)
        return list(seen.values())

    def adapter_groups(self) -> dict[tuple[str, str], list[str]]:
        """``(base model, adapter) -> agents`` for every adapter, shared or not."""
        groups: dict[tuple[str, str], list[str]] = {}
        for agent, b in self._bindings.items():
            if b.adapter is not None:
                groups.setdefault((b.backbone, b.adapter), []).append(agent)
        return groups

    @contextlib.contextmanager
    def acting(self, agent: str, *, reference: bool = False) -> Iterator[Any]:
        """Context in which the agent's model has the agent's adapter active.

        Args:
            agent: The agent.
            reference: Disable all adapters instead (the reference policy: the plain base model).

        Yields:
            The model to call.
        """
        b = self._binding(agent)
        adapter = None if reference else b.adapter
        with self._backbones[b.backbone].using(adapter) as model:
            yield model

    @contextlib.contextmanager
    def untuned(self, agents: Sequence[str]) -> Iterator[None]:
        """Context in which ``agents`` act with the plain base model (their adapters off), as
        before training: a fresh LoRA adapter (B zero-initialised, peft's default) leaves the base
        model's outputs unchanged. Other agents, even ones sharing an adapter, keep theirs.

        Raises:
            KeyError: An agent the policy does not have.
        """
        saved = {a: self._binding(a) for a in agents}
        try:
            for agent, binding in saved.items():
                self._bindings[agent] = _AgentBinding(binding.backbone, None, False)
            yield
        finally:
            self._bindings.update(saved)

    # ------------------------------------------------------------------ rendering
    def render(
        self, agent: str, messages: Sequence[Mapping[str, Any]] | Mapping[str, Any]
    ) -> list[int]:
        """Prompt ids of an observation under the agent's chat template."""
        return render_prompt_ids(self.tokenizer(agent), messages)

    def forget_prompts(self) -> None:
        """Empty the prefix store (the keys and values kept from earlier calls) and start the
        prompt-token counts (``prefill``, ``update_prefill``) again from zero."""
        self.prefix_store.clear()
        self.prefill.take()
        self.update_prefill.take()

    # ------------------------------------------------------------------ persistence
    def save_adapters(self, directory: str) -> None:
        """Save every adapter in standard peft format, one folder per adapter.

        See :func:`marft_algos.policy.adapters.save_adapters`.
        """
        from marft_algos.policy.adapters import save_adapters

        save_adapters(self, directory)

    def load_adapters(self, directory: str, *, strict: bool = True) -> None:
        """Load adapter weights saved by :meth:`save_adapters` into the existing adapters.

        See :func:`marft_algos.policy.adapters.load_adapters`.
        """
        from marft_algos.policy.adapters import load_adapters

        load_adapters(self, directory, strict=strict)

    def to(self, device: torch.device | str) -> MultiAgentPolicy:
        """Move every base model (and its adapters) to ``device``."""
        dev = torch.device(device)
        for backbone in self._backbones.values():
            backbone.model.to(dev)
            backbone.device = dev
        return self
