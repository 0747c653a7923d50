"""The vLLM engine's settings (:class:`VLLMSettings`) and the constants they are checked against:
the LoRA ranks vLLM accepts and the post-sync probe's default tolerance per weight dtype."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "PROBE_TOLERANCE",
    "VLLM_LORA_RANKS",
    "VLLMSettings",
    "default_probe_tolerance",
]

#: LoRA ranks vLLM accepts for ``max_lora_rank``; the policy's rank is rounded up to one of them.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)

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
