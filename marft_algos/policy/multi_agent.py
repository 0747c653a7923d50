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
from typing import Any, NamedTuple

import torch

from marft_algos.policy.backbone import Backbone, load_backbone, seeded_rng
from marft_algos.policy.config import AgentSpec, LoraSettings
from marft_algos.policy.decoding import decode
from marft_algos.policy.forward import (
    action_logits,
    checkpointed_layers,
    full_attention_only,
    log_probs_and_entropy,
    pack,
)
from marft_algos.policy.kv_cache import shared_prompt_action_logits
from marft_algos.policy.prefix_cache import (
    MIN_SHARED_TOKENS,
    PREFIX_STORE_TOKENS,
    PrefillCounter,
    PrefixStore,
    weights_fingerprint,
)
from marft_algos.policy.rendering import render_prompt_ids
from marft_algos.protocols import GenerationSettings, Messages

__all__ = ["Generation", "MultiAgentPolicy", "TokenLogProbs"]

logger = logging.getLogger(__name__)


class Generation(NamedTuple):
    """One sampled action of one agent.

    Attributes:
        prompt_ids: Token ids of the rendered prompt (no padding).
        action_ids: Exactly the sampled token ids, EOS included when produced, no padding.
        log_probs: Per-token log-probs of ``action_ids`` (policy log-prob convention).
        text: ``action_ids`` decoded without special tokens (what the env receives).
        finished: True if the agent produced an end-of-turn token, False if it hit the length cap.
        agent: The agent that acted.
        temperature: Temperature of the distribution ``log_probs`` are taken under.
        top_k: Top-k cut of that distribution (0: none).
        top_p: Top-p cut of that distribution (1: none).
    """

    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool
    agent: str = ""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


class TokenLogProbs(NamedTuple):
    """Result of :meth:`MultiAgentPolicy.token_log_probs` (unpacks as a 3-tuple)."""

    log_probs: torch.Tensor  # (batch, T_act), 0 where mask is False
    entropy: torch.Tensor | None  # (batch, T_act) or None
    mask: torch.Tensor  # (batch, T_act) bool


@dataclass(frozen=True)
class _AgentBinding:
    backbone: str
    adapter: str | None
    trainable: bool


class MultiAgentPolicy:
    """Maps every agent of a team to a base model and (optionally) a LoRA adapter.

    Build it with :meth:`from_pretrained`. Models stay in eval mode (dropout off) so that rollout
    and update forward passes are identical.

    Args:
        backbones: Loaded base models by name.
        bindings: Per agent, which backbone and adapter it uses and whether it trains.
        temperature: Default sampling temperature, and the temperature of greedy generations'
            and :meth:`token_log_probs`' log-probs when none is given.
    """

    merge_adapters_for_generation: bool = True
    """Generate with the agent's LoRA adapter folded into copies of the adapted base weights
    (:meth:`~marft_algos.policy.backbone.Backbone.merged`): one matmul per layer instead of three
    and no adapter code per decode step. The base weights themselves are never modified, so the
    update's forward is exactly the unmerged one; the rollout log-probs differ from it by float
    round-off only (tested). Costs one copy of the adapted weights while generating; set False to
    generate through the unmerged adapter. Applies to float32 base weights only: 16-bit weights
    always generate through the unmerged adapter, since rounding ``W + ΔW`` to 16 bits erases
    small adapter updates."""

    share_prompts_in_update: bool = True
    """:meth:`token_log_probs` runs each distinct prompt of a batch once, without padding, and
    shares its keys and values among the rows that continue it (a GRPO group), instead of running
    every row's padded prompt (:func:`~marft_algos.policy.kv_cache.shared_prompt_action_logits`;
    models with full attention only). Same log-probs and gradients up to float round-off."""

    shared_prefix_tokens: int | None = MIN_SHARED_TOKENS
    """Fewest leading tokens that prompts of one :meth:`generate` or :meth:`token_log_probs`
    call must share for that beginning to run once, its keys and values continued by each
    (:func:`~marft_algos.policy.prefix_cache.shared_prefix_groups`; models with full attention
    only). None: only identical prompts share (each other prompt runs from its first token).
    Same tokens, log-probs and gradients up to float round-off."""

    prefix_store_tokens: int = PREFIX_STORE_TOKENS
    """Prompt tokens of keys and values :meth:`generate` keeps from earlier calls, per policy, so
    a later prompt that begins alike (an agent's system prompt and examples, a program's second
    call repeating its first) continues from them instead of prefilling them again
    (:class:`~marft_algos.policy.prefix_cache.PrefixStore`; models with full attention only). An
    entry serves only the weights that computed it: any change to the parameters empties the
    agent's entries. 0 turns the store off (prompts of one call that begin alike still share
    their beginning). Same tokens and log-probs up to float
    round-off."""

    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass of :meth:`token_log_probs`
    instead of keeping them (:func:`~marft_algos.policy.forward.checkpointed_layers`): activation
    memory of about one layer instead of all, for one more forward pass per update. The update then
    runs every row's padded prompt (a checkpointed layer keeps no KV cache to share a prompt
    through). Same log-probs and gradients up to float round-off (tested)."""

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

    # ------------------------------------------------------------------ log-probs
    def token_log_probs(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        action_ids: Sequence[Sequence[int]],
        *,
        reference: bool = False,
        with_entropy: bool = False,
        temperature: float | None = None,
        top_k: int = 0,
        top_p: float = 1.0,
        differentiable_entropy: bool = True,
    ) -> TokenLogProbs:
        """Per-token log-probs of actions given prompts, differentiable w.r.t. the agent's adapter.

        Args:
            agent: The agent.
            prompt_ids: Prompt token ids per sample.
            action_ids: Action token ids per sample (as returned in :class:`Generation`).
            reference: Use the base model with all adapters disabled (the KL reference policy).
            with_entropy: Also return per-token entropies of the distribution.
            temperature: Temperature of the distribution (default: the policy's); pass the
                rollout's sampling temperature so the ratio compares like with like.
            top_k: Top-k cut of the distribution, as in sampling (0: none).
            top_p: Top-p cut of the distribution, as in sampling (1: none). With a cut, an action
                token outside the current top-k / top-p set has log-prob ``-inf``.
            differentiable_entropy: False: the entropy is computed without autograd, for logging
                only (cheaper when the loss has no entropy bonus).

        Returns:
            ``(log_probs, entropy, mask)``, each ``(batch, T_act)`` with ``T_act`` the longest
            action; padded entries are 0 and ``mask`` is False there.
        """
        out, _ = self.token_log_probs_with_uncut(
            agent,
            prompt_ids,
            action_ids,
            reference=reference,
            with_entropy=with_entropy,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            differentiable_entropy=differentiable_entropy,
            with_uncut=False,
        )
        return out

    def token_log_probs_with_uncut(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        action_ids: Sequence[Sequence[int]],
        *,
        reference: bool = False,
        with_entropy: bool = False,
        temperature: float | None = None,
        top_k: int = 0,
        top_p: float = 1.0,
        differentiable_entropy: bool = True,
        with_uncut: bool = True,
    ) -> tuple[TokenLogProbs, torch.Tensor | None]:
        """:meth:`token_log_probs`, and from the same forward pass the log-probs under the
        temperature alone (no top-k/top-p cut): what the KL terms to the reference compare.

        Returns:
            ``(token_log_probs, uncut)``: ``uncut`` is ``(batch, T_act)``, differentiable, 0 on
            padding; the same tensor as the cut log-probs when there is no cut; None unless
            ``with_uncut``.
        """
        backbone = self.backbone(agent)
        temp = self.temperature if temperature is None else float(temperature)
        batch = pack(prompt_ids, action_ids, backbone.pad_id, backbone.device)
        width = batch.action_ids.shape[1]  # 0: no action has a token
        if width == 0 and not len(prompt_ids):
            empty = torch.zeros(batch.action_ids.shape, device=backbone.device)
            out = TokenLogProbs(empty, empty.clone() if with_entropy else None, batch.action_mask)
            return out, (empty.clone() if with_uncut else None)
        if width == 0:
            # The forward still runs, over one stand-in token per row, and its outputs are cut
            # to width 0 below: a loss over them keeps its graph (a backward runs), and under
            # --fsdp this rank runs the same passes as ranks whose chunk has tokens.
            batch = pack(
                prompt_ids, [[backbone.pad_id]] * len(prompt_ids), backbone.pad_id, backbone.device
            )
        checkpointing = self.gradient_checkpointing and torch.is_grad_enabled()
        with self.acting(agent, reference=reference) as model:
            # A checkpointed layer writes no KV cache, which the shared-prompt path needs.
            if (
                self.share_prompts_in_update
                and full_attention_only(model.config)
                and not checkpointing
            ):
                logits = shared_prompt_action_logits(
                    model, batch, min_shared=self.shared_prefix_tokens, counter=self.update_prefill
                )  # (batch, T, vocab)
            else:
                self.update_prefill.add(sum(len(p) for p in prompt_ids), 0)
                with checkpointed_layers(model, checkpointing):
                    logits = action_logits(model, batch)  # (batch, T, vocab)
        logp, entropy = log_probs_and_entropy(
            logits,
            batch.action_ids,
            batch.action_mask,
            temperature=temp,
            top_k=top_k,
            top_p=top_p,
            with_entropy=with_entropy,
            differentiable_entropy=differentiable_entropy,
        )
        uncut = None
        if with_uncut:
            uncut = (
                log_probs_and_entropy(
                    logits, batch.action_ids, batch.action_mask, temperature=temp
                )[0]
                if top_k or top_p < 1.0
                else logp
            )  # (batch, T)
        if width == 0:  # the stand-in token's columns go
            entropy = None if entropy is None else entropy[:, :0]
            uncut = None if uncut is None else uncut[:, :0]
            return TokenLogProbs(logp[:, :0], entropy, batch.action_mask[:, :0]), uncut
        return TokenLogProbs(logp, entropy, batch.action_mask), uncut

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        agent: str,
        messages_batch: Sequence[Messages],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """Sample one action per observation for one agent, in a single batched ``generate`` call.

        Args:
            agent: The agent acting.
            messages_batch: One chat transcript (or env observation ``{"messages": ...}``) per
                sample; rendered with the agent's chat template.
            settings: How to sample: the agent's length cap (:meth:`GenerationSettings.tokens_for`),
                temperature (None: the policy's; reported log-probs are those of the sampled
                distribution, see the module docstring), top-p, top-k, greedy or not, and an
                optional seed.
            generator: Seeds the sampling: one seed is drawn from it and sampling runs under that
                seed in a forked RNG, so the same generator state gives the same samples and the
                global RNG is not advanced. ``settings.seed`` does the same with an explicit seed;
                without either, sampling uses the global torch RNG (``torch.manual_seed`` makes it
                reproducible).

        Returns:
            One :class:`Generation` per observation, in order.
        """
        tokenizer = self.tokenizer(agent)
        prompts = [render_prompt_ids(tokenizer, m) for m in messages_batch]
        return self.generate_from_ids(agent, prompts, settings, generator=generator)

    def generate_from_ids(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """:meth:`generate` from already-rendered prompt token ids (multi-turn token-in)."""
        max_new_tokens = settings.tokens_for(agent)
        do_sample, seed = settings.do_sample, settings.seed
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}.")
        if generator is not None and seed is not None:
            raise ValueError(
                f"Pass either a generator or settings.seed (got seed={seed}), not both."
            )
        backbone = self.backbone(agent)
        temp = self.temperature if settings.temperature is None else float(settings.temperature)
        prompts = [list(map(int, p)) for p in prompt_ids]
        if not prompts:
            return []
        if do_sample and temp <= 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temp}.")
        if generator is not None:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        # Greedy decoding samples nothing: its log-probs follow the policy temperature, uncut.
        dist_temp, dist_k, dist_p = (
            (temp, settings.top_k, settings.top_p) if do_sample else (self.temperature, 0, 1.0)
        )
        binding = self._binding(agent)
        adapter = binding.adapter
        merged = adapter is not None and self.merge_adapters_for_generation
        store_key = (binding.backbone, adapter, merged)
        fingerprint = weights_fingerprint(backbone.model) if self.prefix_store_tokens else None
        store = None if fingerprint is None else self.prefix_store
        if store is not None:
            store.max_tokens = self.prefix_store_tokens
            store.validate(store_key, fingerprint)
        with contextlib.ExitStack() as stack:
            stack.enter_context(seeded_rng(seed, backbone.device))
            if merged:
                model = stack.enter_context(backbone.merged(adapter))  # type: ignore[arg-type]
            else:
                model = stack.enter_context(self.acting(agent))
            out = decode(
                model,
                prompts,
                max_new_tokens=max_new_tokens,
                pad_id=backbone.pad_id,
                eos_ids=backbone.eos_ids,
                do_sample=do_sample,
                temperature=dist_temp,
                top_k=dist_k,
                top_p=dist_p,
                store=store,
                store_key=store_key,
                min_shared=self.shared_prefix_tokens,
            )
        self.prefill.add(out.prefill_tokens, out.prefill_saved)
        actions = out.actions
        logp_rows = out.log_probs
        finished = out.finished
        return [
            Generation(
                prompt_ids=prompts[i],
                action_ids=actions[i],
                log_probs=logp_rows[i],
                text=backbone.tokenizer.decode(actions[i], skip_special_tokens=True),
                finished=finished[i],
                agent=agent,
                temperature=dist_temp,
                top_k=dist_k,
                top_p=dist_p,
            )
            for i in range(len(actions))
        ]

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
