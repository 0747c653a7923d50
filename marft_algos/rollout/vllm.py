"""Rollouts on vLLM: one engine holds the shared base model and serves every agent's LoRA adapter.

:class:`VLLMRolloutBackend` implements :class:`~marft_algos.protocols.RolloutBackend`: the trainer
sends its rollouts through :meth:`~VLLMRolloutBackend.generate` and calls
:meth:`~VLLMRolloutBackend.sync_adapters` after every update (``docs/scaling.md``). It returns the
same :class:`~marft_algos.policy.multi_agent.Generation` records as
:meth:`MultiAgentPolicy.generate <marft_algos.policy.MultiAgentPolicy.generate>`:

- **Prompts** are rendered by the policy (:meth:`MultiAgentPolicy.render`, the agent's chat
  template) and sent to the engine as token ids, so the prompt ids the update reads are exactly what
  the engine read. The engine never tokenises (``skip_tokenizer_init``); actions are decoded with the
  policy's tokenizer.
- **Log-probs** are the engine's *processed* log-probs (``logprobs_mode="processed_logprobs"``): of
  the distribution after temperature, top-k and top-p, the policy's convention
  (:func:`~marft_algos.policy.forward.sampling_logits`). Generation stops at the policy's
  end-of-turn ids and nowhere else (the model's Hub generation defaults are ignored:
  ``generation_config="vllm"``).
- **Adapters** are synced under versioned names: after update ``v`` each trainable adapter is
  saved in peft format and loaded as ``f"{adapter}@v{v}"`` with a fresh integer id, and the
  previous version is unloaded. vLLM keys loaded weights by that id, so a new version can never
  be served from the old one's weights. Frozen adapters are loaded once; agents sharing an adapter
  share one engine adapter; agents without an adapter are served by the base model.
- **A probe** after each sync samples a few fixed prompts per synced adapter on the engine and
  recomputes their log-probs with :meth:`MultiAgentPolicy.token_log_probs`; a maximum absolute
  difference above ``probe_tolerance`` raises :class:`AdapterSyncError` naming the agent.

The engine runs in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, vLLM's own
variable, is set unless you set it; so is ``VLLM_LOGGING_LEVEL=ERROR``), so there is nothing to
shut down but :meth:`close` frees its memory and adapter files. On CPU the engine leaves the process's torch threads as they were
(``VLLM_CPU_OMP_THREADS_BIND=nobind`` unless set). A team on two different base models is refused:
one engine serves one base model.

This module holds the backend; its parts live beside it, and their public names are importable
from here too: the engine's settings and their constants (:mod:`~marft_algos.rollout.vllm_settings`:
:class:`VLLMSettings`, :func:`default_probe_tolerance`), importing vLLM and starting the engine
(:mod:`~marft_algos.rollout.vllm_engine`: :func:`import_vllm`, :class:`VLLMNotInstalledError`),
adapter syncing with the post-sync probe (:mod:`~marft_algos.rollout.vllm_adapters`:
:class:`AdapterSyncError`), and one engine call's requests and records
(:mod:`~marft_algos.rollout.vllm_generation`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from marft_algos.policy.multi_agent import Generation
from marft_algos.policy.prefix_cache import PrefillCounter
from marft_algos.protocols import GenerationSettings, Messages
from marft_algos.rollout.vllm_adapters import (
    PROBE_MESSAGES,
    AdapterSyncError,
    EngineAdapters,
    check_probe,
    probe_differences,
)
from marft_algos.rollout.vllm_engine import (
    VLLM_INSTALL,
    VLLMNotInstalledError,
    engine_model,
    import_vllm,
    start_engine,
)
from marft_algos.rollout.vllm_generation import (
    engine_outputs,
    generations,
    rescored,
    sampling_params,
)
from marft_algos.rollout.vllm_settings import (
    PROBE_TOLERANCE,
    VLLM_LORA_RANKS,
    VLLMSettings,
    default_probe_tolerance,
)

if TYPE_CHECKING:
    from marft_algos.policy.multi_agent import MultiAgentPolicy

__all__ = [
    "PROBE_MESSAGES",
    "PROBE_TOLERANCE",
    "VLLM_INSTALL",
    "VLLM_LORA_RANKS",
    "AdapterSyncError",
    "VLLMNotInstalledError",
    "VLLMRolloutBackend",
    "VLLMSettings",
    "default_probe_tolerance",
    "import_vllm",
]

logger = logging.getLogger(__name__)


class VLLMRolloutBackend:
    """A vLLM engine generating every agent's rollouts with the agent's LoRA adapter.

    Args:
        policy: The trained policy (its agents, base model, adapters, chat templates and
            tokenizer). All agents must act on one base model.
        settings: Engine settings (:class:`VLLMSettings`).
        device: The engine's device, where it differs from the policy's (default: the policy's).
        sync: Serve the policy's adapters at once (version 0). ``False`` leaves that to the
            trainer, which serves them once its base is sharded: under ``--fsdp`` a rank that
            loaded the base empty has no adapter weights before (``version`` stays -1 until then).

    Raises:
        VLLMNotInstalledError: vLLM is not installed.
        ValueError: The team uses more than one base model, or the base model is a local
            folder without a Hugging Face model (a Hub id is passed to the engine).
        ModelLoadError: The base model is a local path that does not exist.
    """

    def __init__(
        self,
        policy: MultiAgentPolicy,
        settings: VLLMSettings | None = None,
        *,
        device: torch.device | None = None,
        sync: bool = True,
    ) -> None:
        from marft_algos.policy.pretrained import resolve_model

        self.settings = settings or VLLMSettings()
        #: Ranks per engine under torchrun: the trainer has them sample together.
        self.tensor_parallel_size = self.settings.tensor_parallel_size
        #: Where the engine runs: the policy's device, unless the policy waits on the host to be
        #: sharded onto this one (``--fsdp``).
        self.device = device
        self.policy = policy
        bases = sorted({policy.base_model_name(a) for a in policy.agents})
        if len(bases) != 1:
            by_base = {
                b: [a for a in policy.agents if policy.base_model_name(a) == b] for b in bases
            }
            raise ValueError(
                f"The vLLM rollout backend serves one base model with every agent's adapter, but "
                f"this team acts on {len(bases)} base models ({by_base}). Put every agent on one "
                f"base model, or generate with the policy (--rollout-backend transformers)."
            )
        self.base_model = bases[0]
        self._backbone = policy.backbone(policy.agents[0])
        self.model_path = engine_model(self.base_model, resolve_model(self.base_model))
        self.asleep = False
        dtype = next(self._backbone.model.parameters()).dtype
        self.dtype = str(dtype).removeprefix("torch.")
        tol = self.settings.probe_tolerance
        self.probe_tolerance = float(tol if tol is not None else default_probe_tolerance(dtype))
        groups = policy.adapter_groups()
        ranks = [int(self._backbone.model.peft_config[adapter].r) for _, adapter in groups]
        self._adapters = EngineAdapters({a: policy.adapter_name(a) for a in policy.agents})
        self.version = -1
        #: Largest engine-vs-policy log-prob difference of each probed agent at the last sync.
        self.probe_differences: dict[str, float] = {}
        #: Prompt tokens the engine prefilled and took from its prefix cache, per
        #: :meth:`~marft_algos.policy.prefix_cache.PrefillCounter.take`.
        self.prefill = PrefillCounter()
        self.llm = start_engine(
            self.settings,
            model=self.model_path,
            dtype=self.dtype,
            device=self.device or self._backbone.device,
            n_adapters=len(groups),
            max_rank=max(ranks, default=0),
        )
        if sync:
            self.sync_adapters(policy, 0)

    def forget_prompts(self) -> None:
        """Start the prompt-token counts again (the engine's prefix cache manages itself)."""
        self.prefill.take()

    def close(self) -> None:
        """Free the engine and delete the adapter files (the backend is unusable afterwards)."""
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
            del llm
        self._adapters.close()

    def __enter__(self) -> VLLMRolloutBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _engine(self) -> Any:
        """The engine, woken first if it sleeps."""
        if self.llm is None:
            raise RuntimeError("This VLLMRolloutBackend was closed; build a new one.")
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        return self.llm

    def sleep(self) -> None:
        """With ``VLLMSettings.sleep_mode``: move the engine's weights to CPU memory and free its
        KV cache (vLLM's sleep level 1) until the next generation or adapter sync wakes it; the
        trainer calls this before each update and evaluation. Without sleep mode, nothing."""
        if self.settings.sleep_mode and self.llm is not None and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    # ------------------------------------------------------------------ adapters
    def sync_adapters(self, policy: Any, version: int) -> None:
        """Serve the policy's current adapters as version ``version``, then probe them.

        Every trainable adapter is saved and loaded under ``f"{adapter}@v{version}"`` with a fresh
        integer id; its previous version is unloaded. Frozen adapters are loaded on the first
        call only.

        Raises:
            AdapterSyncError: The probe found an agent whose engine log-probs differ from the
                policy's by more than ``probe_tolerance``.
        """
        synced = self._adapters.sync(self._engine().llm_engine, policy, version)
        self.version = version
        if synced and self.settings.probe_tokens:
            self.probe(policy, synced)

    def lora_request(self, agent: str) -> Any:
        """The engine adapter an agent acts with now (None: the base model)."""
        return self._adapters.request(agent)

    def probe(self, policy: Any, agents: Sequence[str]) -> dict[str, float]:
        """Sample the probe prompts with each agent's engine adapter and compare the log-probs
        with the policy's; returns the largest difference per agent.

        Raises:
            AdapterSyncError: An agent's difference exceeds ``probe_tolerance``.
        """
        differences = probe_differences(
            policy, agents, self.generate_mixed, self.settings.probe_tokens
        )
        self.probe_differences = differences
        check_probe(
            differences,
            tolerance=self.probe_tolerance,
            version=self.version,
            adapter_of=self._adapters.adapter_of,
        )
        return differences

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        agent: str,
        messages_batch: Sequence[Messages],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """:meth:`MultiAgentPolicy.generate`, on the engine with the agent's adapter (see
        :meth:`generate_mixed`)."""
        prompts = [self.policy.render(agent, m) for m in messages_batch]
        return self.generate_mixed([agent] * len(prompts), prompts, settings, generator=generator)

    def generate_from_ids(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """:meth:`generate` from already-rendered prompt token ids."""
        return self.generate_mixed(
            [agent] * len(prompt_ids), prompt_ids, settings, generator=generator
        )

    def generate_mixed(
        self,
        agents: Sequence[str],
        prompt_ids: Sequence[Sequence[int]],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """One engine call for prompts of several agents, each under its own adapter.

        Args:
            agents: The acting agent of each prompt.
            prompt_ids: Rendered prompt ids, one list per agent entry.
            settings: How to sample, as in :meth:`MultiAgentPolicy.generate`; each prompt is capped
                at its agent's length (:meth:`GenerationSettings.tokens_for`), and with
                ``settings.seed`` request ``i`` is seeded with ``seed + i``.
            generator: One draw is taken from it; with ``VLLMSettings.seed_requests`` that draw
                seeds the requests as ``settings.seed`` does (same state, same samples), else the
                engine's seeded RNG samples.

        Returns:
            One :class:`Generation` per prompt, in order.
        """
        if len(agents) != len(prompt_ids):
            raise ValueError(
                f"agents and prompt_ids must have one entry per prompt, got {len(agents)} and "
                f"{len(prompt_ids)}."
            )
        caps = [settings.tokens_for(a) for a in agents]
        if caps and min(caps) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {min(caps)}.")
        seed = settings.seed
        if generator is not None and seed is not None:
            raise ValueError(
                f"Pass either a generator or settings.seed (got seed={seed}), not both."
            )
        do_sample, top_p, top_k = settings.do_sample, settings.top_p, settings.top_k
        prompts = [list(map(int, p)) for p in prompt_ids]
        if not prompts:
            return []
        if any(not p for p in prompts):
            raise ValueError("Every prompt needs at least one token; got an empty prompt.")
        policy_temp = self.policy.temperature
        temp = policy_temp if settings.temperature is None else float(settings.temperature)
        if do_sample and temp <= 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temp}.")
        if generator is not None:
            # Drawn either way, so the generator advances as it does for the policy.
            drawn = int(torch.randint(0, 2**62, (1,), generator=generator).item())
            seed = drawn if self.settings.seed_requests else None
        eos = list(self._backbone.eos_ids)
        params = sampling_params(
            caps,
            do_sample=do_sample,
            temperature=temp,
            top_p=top_p,
            top_k=top_k,
            eos=eos,
            seed=seed,
        )
        loras = [self.lora_request(a) for a in agents]
        outputs = engine_outputs(self._engine, prompts, params, loras)
        # Greedy decoding samples nothing: its log-probs follow the policy temperature, uncut;
        # the engine reports them at temperature 1.
        dist_temp, dist_k, dist_p = (temp, top_k, top_p) if do_sample else (policy_temp, 0, 1.0)
        results = generations(
            agents,
            prompts,
            outputs,
            tokenizer=self._backbone.tokenizer,
            eos=eos,
            prefill=self.prefill,
            temperature=dist_temp,
            top_k=dist_k,
            top_p=dist_p,
        )
        if not do_sample and policy_temp != 1.0:
            results = rescored(self.policy, results)
        return results
