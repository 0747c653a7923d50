"""Gradient checkpointing in the update (issue 40): on a Qwen2-style model in eval mode it keeps
fewer bytes for the backward pass and gives the same log-probs and gradients."""

from __future__ import annotations

import torch
from test_update_memory import saved_bytes

from marft_algos.policy import MultiAgentPolicy

PROMPTS = [
    [5, 17, 42, 99, 120, 7, 3, 200, 11, 12],
    [8, 9, 10, 11],
    [5, 17, 42, 99, 120, 7, 3, 200, 11, 12],
]
ACTIONS = [[31, 32, 33, 34, 35, 36], [40, 41, 42], [50, 51, 52, 53, 54, 55, 56, 57]]


def _update(policy: MultiAgentPolicy) -> tuple[int, torch.Tensor, list[torch.Tensor]]:
    params = policy.trainable_parameters("agent")
    for p in params:
        p.grad = None
    out: dict[str, torch.Tensor] = {}

    def run():
        lp = policy.token_log_probs("agent", PROMPTS, ACTIONS, with_entropy=True)
        out["logp"] = lp.log_probs
        out["loss"] = -(lp.log_probs.sum() + 0.1 * lp.entropy.sum())

    saved = saved_bytes(run, list(policy.backbone("agent").model.parameters()))
    out["loss"].backward()
    return saved, out["logp"].detach(), [p.grad.clone() for p in params]


def test_checkpointing_keeps_fewer_bytes_and_gives_the_same_gradients(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(str(tiny_path), ["agent"], seed=0)
    with torch.no_grad():  # an adapter off the identity, so every LoRA weight gets a gradient
        for name, p in policy.backbone("agent").model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    shared = _update(policy)  # the default update: shared prompts, no checkpointing
    policy.share_prompts_in_update = False
    padded = _update(policy)
    policy.gradient_checkpointing = True
    checkpointed = _update(policy)
    model = policy.backbone("agent").model
    assert not model.training and not any(m.training for m in model.modules())  # eval mode kept
    assert checkpointed[0] < 0.6 * padded[0], (checkpointed[0], padded[0])
    for other in (padded, shared):
        torch.testing.assert_close(checkpointed[1], other[1], atol=1e-5, rtol=0)
        for a, b in zip(checkpointed[2], other[2], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # The shared-prompt path is not taken under checkpointing (its KV cache would be dropped).
    policy.share_prompts_in_update = True
    assert torch.equal(_update(policy)[1], checkpointed[1])
