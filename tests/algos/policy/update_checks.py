"""Checks the policy tests share: an update over shared prompt work against the padded one."""

from __future__ import annotations

import torch

#: Rollout log-probs vs. recomputation in a differently laid out batch (float32 on CPU).
LOGP_TOL = 1e-5


def assert_shared_update_equals_padded(policy, agent, gens, **kwargs) -> None:
    """Log-probs, entropies and gradients of ``token_log_probs`` with shared prompts (the
    default) equal those of every row's padded prompt, to float round-off."""
    results = []
    for share in (True, False):
        policy.share_prompts_in_update = share
        out = policy.token_log_probs(
            agent,
            [g.prompt_ids for g in gens],
            [g.action_ids for g in gens],
            with_entropy=True,
            **kwargs,
        )
        (out.log_probs.sum() + 0.1 * out.entropy.sum()).backward()
        grads = [p.grad.clone() for p in policy.trainable_parameters(agent)]
        for p in policy.trainable_parameters(agent):
            p.grad = None
        results.append((out.log_probs.detach(), out.entropy.detach(), out.mask, grads))
    policy.share_prompts_in_update = True
    (lp_s, ent_s, mask_s, grads_s), (lp_p, ent_p, mask_p, grads_p) = results
    assert torch.equal(mask_s, mask_p)
    torch.testing.assert_close(lp_s, lp_p, atol=LOGP_TOL, rtol=0)
    torch.testing.assert_close(ent_s, ent_p, atol=LOGP_TOL, rtol=0)
    assert any(g.abs().max() > 0 for g in grads_s)
    for a, b in zip(grads_s, grads_p, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
