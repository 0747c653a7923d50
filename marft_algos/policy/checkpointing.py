"""Gradient checkpointing of a causal LM's decoder layers, in eval mode.

:func:`checkpointed_layers` is what ``MultiAgentPolicy.gradient_checkpointing`` turns on in the
update; :func:`decoder_layers` lists the layers it recomputes, which ``--fsdp`` also shards.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

__all__ = ["checkpointed_layers", "decoder_layers"]


def decoder_layers(model: Any) -> list[Any]:
    """The model's decoder layers: the modules transformers marks ``GradientCheckpointingLayer``
    (what checkpointing recomputes and ``--fsdp`` shards)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


@contextlib.contextmanager
def checkpointed_layers(model: Any, enabled: bool = True) -> Iterator[None]:
    """Within the context, the model's decoder layers recompute their activations in the backward
    pass instead of keeping them (``torch.utils.checkpoint``, non-reentrant), in eval mode.

    transformers checkpoints a layer only when it is in training mode, and the policy keeps its
    models in eval mode (no dropout: rollout and update compute alike). So only the decoder layers'
    own ``training`` flag is raised, which transformers reads for nothing else; every submodule
    (attention, dropout) stays in eval mode. A layer under checkpointing writes no KV cache, so the
    caller must run a forward without one (:func:`~marft_algos.policy.forward.action_logits`).

    Raises:
        ValueError: The model has no layers transformers can checkpoint.
    """
    if not enabled:
        yield
        return
    from torch.utils.checkpoint import checkpoint

    layers = decoder_layers(model)
    if not layers:
        raise ValueError(
            f"{type(model).__name__} has no layers transformers can checkpoint "
            f"(GradientCheckpointingLayer); set MultiAgentPolicy.gradient_checkpointing = False."
        )
    before = [
        (m, m.gradient_checkpointing, m.training, m.__dict__.get("_gradient_checkpointing_func"))
        for m in layers
    ]
    func = functools.partial(checkpoint, use_reentrant=False)
    try:
        for m in layers:
            m.gradient_checkpointing = True
            setattr(m, "_gradient_checkpointing_func", func)  # noqa: B010  # a plain attribute
            m.training = True  # the layer's own flag only: its submodules stay in eval mode
        yield
    finally:
        for m, flag, training, old in before:
            m.gradient_checkpointing, m.training = flag, training
            if old is None:
                m.__dict__.pop("_gradient_checkpointing_func", None)
            else:
                setattr(m, "_gradient_checkpointing_func", old)  # noqa: B010
