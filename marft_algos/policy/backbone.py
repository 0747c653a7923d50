"""One base causal LM, its tokenizer and the LoRA adapters that live on it.

A :class:`Backbone` owns a transformers causal LM (wrapped in a peft ``PeftModel`` once it has an
adapter), its tokenizer and a table of adapters with their trainable flags. All adapters of one
base model share its weights, so memory is about one model however many agents use it.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from marft_algos.policy.config import LoraSettings, ModelLoadError
from marft_algos.policy.gguf import convert_gguf
from marft_algos.policy.pretrained import resolve_model

__all__ = ["Backbone", "load_backbone"]

logger = logging.getLogger(__name__)


class Backbone:
    """A base model shared by agents, with named LoRA adapters.

    Args:
        name: Model name or path it was loaded from (recorded in checkpoints).
        model: A transformers causal LM.
        tokenizer: Its tokenizer.
        device: Where the model lives.
    """

    def __init__(self, name: str, model: Any, tokenizer: Any, device: torch.device) -> None:
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        #: adapter name -> trainable flag; anything placed on the model (agents, critic) is listed.
        self.adapters: dict[str, bool] = {}
        self._adapter_params: dict[str, list[tuple[str, torch.nn.Parameter]]] = {}
        self.pad_id, self.eos_ids = _special_ids(model, tokenizer)

    @property
    def is_peft(self) -> bool:
        """Whether the model is wrapped by peft (it has at least one adapter)."""
        return hasattr(self.model, "peft_config")

    def add_adapter(
        self,
        adapter: str,
        lora: LoraSettings,
        *,
        trainable: bool,
        path: str | None = None,
        seed: int | None = None,
    ) -> None:
        """Add a LoRA adapter, fresh or loaded from a peft adapter folder.

        Args:
            adapter: Adapter name (unique on this backbone).
            lora: Settings of a fresh adapter (ignored when ``path`` is given).
            trainable: Whether its parameters may require gradients.
            path: Folder of a saved peft adapter to load instead.
            seed: Seed for the LoRA A initialisation; the global RNG is left untouched.
        """
        from peft import PeftModel, get_peft_model

        if adapter in self.adapters:
            raise ValueError(f"Adapter {adapter!r} already exists on base model {self.name!r}.")
        if not adapter or "." in adapter:
            raise ValueError(
                f"Adapter names must be non-empty and contain no '.', got {adapter!r}."
            )
        if adapter in "lora_":
            # peft finds adapter weights by name inside "lora_A.<name>" keys; such names are ambiguous.
            raise ValueError(
                f"Adapter name {adapter!r} is part of peft's 'lora_' prefix and would be confused "
                f"with it when loading; pick a longer name, e.g. AgentSpec(adapter='agent_{adapter}')."
            )
        with seeded_rng(seed, self.device), warnings.catch_warnings():
            # peft still calls transformers' deprecated ``is_gradient_checkpointing``; not ours to fix.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            # An empty (meta) base takes no adapter weights: under --fsdp they come from rank 0.
            warnings.filterwarnings("ignore", message=".*copying from a non-meta parameter.*")
            if path is not None:
                if self.is_peft:
                    self.model.load_adapter(path, adapter_name=adapter, is_trainable=trainable)
                else:
                    self.model = PeftModel.from_pretrained(
                        self.model, path, adapter_name=adapter, is_trainable=trainable
                    )
            elif self.is_peft:
                self.model.add_adapter(adapter, lora.to_peft())
            else:
                self.model = get_peft_model(self.model, lora.to_peft(), adapter_name=adapter)
        self.model.to(self.device)
        self.model.eval()
        self.adapters[adapter] = trainable
        self._index_adapter_params()
        if not self._adapter_params[adapter]:
            raise ValueError(
                f"Adapter {adapter!r} on {self.name!r} has no parameters: its target modules "
                f"matched no layer; check LoraSettings.target_modules."
            )
        self.apply_trainable_flags()

    def _index_adapter_params(self) -> None:
        # peft parameter names look like "...q_proj.lora_A.<adapter>.weight".
        self._adapter_params = {name: [] for name in self.adapters}
        for pname, param in self.model.named_parameters():
            parts = pname.split(".")
            # The adapter name is the key right after the first "lora_*" container.
            idx = next((i for i, part in enumerate(parts) if part.startswith("lora_")), None)
            if idx is None or idx + 1 >= len(parts):
                continue
            adapter = parts[idx + 1]
            if adapter in self._adapter_params:
                self._adapter_params[adapter].append((pname, param))

    def adapter_parameters(self, adapter: str) -> list[torch.nn.Parameter]:
        """Parameters of one adapter (in a stable order)."""
        return [p for _, p in self._adapter_params[adapter]]

    def named_adapter_parameters(self, adapter: str) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, parameter)`` pairs of one adapter."""
        return list(self._adapter_params[adapter])

    def apply_trainable_flags(self) -> None:
        """Make exactly the trainable adapters' parameters require gradients.

        peft's ``set_adapter`` marks the active adapter trainable and every other one frozen; the
        policy switches adapters on every call, so the flags are re-applied from the table.
        """
        for adapter, params in self._adapter_params.items():
            flag = self.adapters[adapter]
            for _, p in params:
                if p.requires_grad != flag:
                    p.requires_grad_(flag)

    @contextlib.contextmanager
    def using(self, adapter: str | None) -> Iterator[Any]:
        """Context in which the model acts with ``adapter`` (None: the base model, adapters off).

        Yields:
            The model to call.
        """
        if adapter is None:
            if self.is_peft:
                with self.model.disable_adapter():
                    yield self.model
            else:
                yield self.model
            return
        if adapter not in self.adapters:
            raise KeyError(f"No adapter {adapter!r} on base model {self.name!r}.")
        if self.model.active_adapter != adapter:
            self.model.set_adapter(adapter)
            self.apply_trainable_flags()
        yield self.model

    @contextlib.contextmanager
    def merged(self, adapter: str) -> Iterator[Any]:
        """Context for inference with ``adapter`` folded into copies of the base weights.

        Each adapted linear layer computes with ``W + scale·B·A`` (a new tensor) and its LoRA
        branch off: one matmul instead of three per layer and per decode step. The original base
        weights are put back untouched on exit (not un-merged by subtraction, which would leave
        rounding in them), so forward passes outside the context compute exactly as before.
        Adapters that cannot be folded this way (DoRA, LoRA on embeddings or convolutions) are
        used unmerged, and so are adapters on 16-bit base weights: ``W + ΔW`` rounded to bfloat16
        keeps 8 significant bits, so every entry with ``|ΔW|`` below about ``|W|/512`` would
        vanish (most of an early LoRA update) and generation would sample near the base model
        while the update runs through the adapter. Unmerged, generation and update compute the
        same way. No gradients flow inside the context.

        Yields:
            The model to call.
        """
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.lora import LoraLayer

        with self.using(adapter) as model:
            layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
            foldable = all(
                type(m) is LoraLinear
                and m.get_base_layer().weight.dtype in _MERGE_DTYPES
                and not m.use_dora.get(adapter, False)
                and not getattr(m, "lora_bias", {}).get(adapter, False)
                for m in layers
            )
            if not foldable:
                yield model
                return
            originals: list[tuple[Any, torch.Tensor]] = []
            try:
                with torch.no_grad():
                    for m in layers:
                        if adapter in m.lora_A:
                            weight: Any = m.get_base_layer().weight
                            delta = m.get_delta_weight(adapter).to(weight.dtype)  # type: ignore[attr-defined]
                            originals.append((weight, weight.data))
                            weight.data = weight.data + delta
                with torch.no_grad(), model.disable_adapter():
                    yield model
            finally:
                for weight, data in originals:
                    weight.data = data
                # peft re-enabling the adapters re-marks parameters trainable; restore the table.
                self.apply_trainable_flags()


#: Base weight dtypes precise enough to hold ``W + ΔW`` (:meth:`Backbone.merged`).
_MERGE_DTYPES = (torch.float32, torch.float64)


def _special_ids(model: Any, tokenizer: Any) -> tuple[int, list[int]]:
    """Pad id and every id that ends a turn (tokenizer eos plus the model's generation eos ids)."""
    eos: list[int] = []
    if tokenizer.eos_token_id is not None:
        eos.append(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        for i in [gen_eos] if isinstance(gen_eos, int) else gen_eos:
            if int(i) not in eos:
                eos.append(int(i))
    if not eos:
        raise ValueError(
            "The tokenizer has no eos_token and the model's generation_config names no "
            "eos_token_id; set tokenizer.eos_token to the token that ends an assistant turn."
        )
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = eos[0]
    return int(pad), eos


@contextlib.contextmanager
def seeded_rng(seed: int | None, device: torch.device) -> Iterator[None]:
    """Run under ``torch.manual_seed(seed)`` in a forked RNG, or unchanged when seed is None."""
    if seed is None:
        yield
        return
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _empty_model(path: str, kwargs: dict[str, Any]) -> Any:
    """``path``'s causal LM built on the meta device: shapes and dtypes, no storage."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if kwargs.get("dtype") == "auto":
        raise ValueError(
            "dtype='auto' reads the dtype from the weights, which a model loaded on the meta "
            "device never reads; pass the dtype (e.g. torch.bfloat16)."
        )
    trust = (
        {"trust_remote_code": kwargs["trust_remote_code"]} if "trust_remote_code" in kwargs else {}
    )
    config = AutoConfig.from_pretrained(path, **trust)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, **kwargs)


def default_dtype(device: torch.device) -> torch.dtype:
    """Weight dtype when none is given: bfloat16 on a GPU (half the memory, its fast kernels),
    float32 elsewhere (exact log-prob equality between rollout and update on a CPU)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def check_model_path(path: str) -> None:
    """Fail early, naming the path, when a local model path is missing or not a model folder.

    A name that does not exist locally and does not look like a path (``org/name``) is left to
    ``from_pretrained`` as a Hub id.
    """
    local = Path(path).expanduser()
    if local.exists():
        if local.is_file():
            raise ModelLoadError(
                f"Model path {path!r} is a file; pass the folder that holds config.json, the weights "
                f"and the tokenizer (the output of save_pretrained)."
            )
        if not (local / "config.json").is_file():
            raise ModelLoadError(
                f"Model folder {path!r} is not a Hugging Face model: it has no config.json. Pass the "
                f"folder written by save_pretrained (config.json, weights, tokenizer files)."
            )
        return
    looks_local = (
        path.startswith((".", "/", "~"))
        or path.count("/") > 1
        or path.endswith("/")
        or "\\" in path
    )
    if looks_local:
        raise ModelLoadError(
            f"Model path {path!r} does not exist; check the path, or pass a built-in short name "
            f"(marft-tiny-math) or a Hub id such as Qwen/Qwen2.5-0.5B-Instruct."
        )


def load_backbone(
    name_or_path: str,
    *,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str = "cpu",
    model_kwargs: dict[str, Any] | None = None,
) -> Backbone:
    """Load a causal LM and its tokenizer with ``from_pretrained`` and freeze the base weights.

    The model's own ``generation_config`` (Hub defaults such as ``top_k=20`` or a repetition
    penalty) is replaced by a neutral one holding only the special token ids: sampling settings
    always come from the policy call, so the sampling distribution is exactly the one whose
    log-probs the policy reports.

    Args:
        name_or_path: Hub id, local folder, ``.gguf`` file, or a built-in model's short name (see
            :func:`~marft_algos.policy.pretrained.resolve_model`).
        dtype: Weight dtype (default ``torch.bfloat16`` on CUDA, ``torch.float32`` elsewhere;
            ``"auto"`` for the checkpoint's dtype).
        device: Device for the weights. ``"meta"`` builds the model from its config without
            reading or allocating any weight: under ``fsdp`` every rank but rank 0 loads this way,
            and sharding fills each rank's shards from rank 0's weights
            (:func:`~marft_algos.trainers.sharding.shard_run`).
        model_kwargs: Extra ``AutoModelForCausalLM.from_pretrained`` arguments. ``gguf_file``
            (as in transformers) names a GGUF file inside the local folder ``name_or_path``; it is
            converted once to a cached folder (:func:`~marft_algos.policy.gguf.convert_gguf`).

    Returns:
        The loaded :class:`Backbone` (in eval mode, base parameters frozen).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    dev = torch.device(device)
    kwargs = dict(model_kwargs or {})
    kwargs.setdefault("dtype", dtype if dtype is not None else default_dtype(dev))
    gguf_file = kwargs.pop("gguf_file", None)
    if gguf_file is not None:
        if not Path(name_or_path).is_dir():
            raise ValueError(
                f"model_kwargs['gguf_file']={gguf_file!r} names a file inside a local folder, but "
                f"{name_or_path!r} is not a folder; pass the folder, or the .gguf path as the model."
            )
        path = str(convert_gguf(Path(name_or_path) / gguf_file))
    else:
        # Short names ("marft-tiny-math") and .gguf files map to a folder; the rest pass through.
        path = resolve_model(name_or_path)
    check_model_path(path)
    try:
        if dev.type == "meta":  # the architecture without its weights (--fsdp's other ranks)
            model = _empty_model(path, kwargs)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"Could not load model {str(name_or_path)!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}. "
            f"Pass a local folder with config.json, weights and tokenizer files, a built-in short name "
            f"(marft-tiny-math, smollm2-135m-instruct), a .gguf file, or a Hub id of a causal LM that is in "
            f"the local cache (no network at run time)."
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        logger.warning(
            "The tokenizer of %r has no chat template: prompts are rendered with marft's plain "
            "'Role: text' fallback, which a model not trained on it may not follow (held-out accuracy "
            "can sit at 0). Set tokenizer.chat_template, or pass --chat-template on the command line.",
            str(name_or_path),
        )
    model.to(dev)  # type: ignore[arg-type]  # transformers' stubs type .to() for dtypes only
    model.eval()
    model.requires_grad_(False)
    original = model.generation_config
    backbone = Backbone(str(name_or_path), model, tokenizer, dev)
    model.generation_config = GenerationConfig(
        eos_token_id=backbone.eos_ids,
        pad_token_id=backbone.pad_id,
        bos_token_id=getattr(original, "bos_token_id", None),
    )
    return backbone
