"""What the update keeps for the backward pass per action token, counted with saved-tensor hooks
on the meta device at a real vocabulary (issue 40), and the chunked log-probs against
log_softmax."""

from __future__ import annotations

import pytest
import torch

from marft_algos.policy.forward import log_probs_and_entropy

#: Qwen2.5's vocabulary.
VOCAB = 151_936


def saved_bytes(fn, resident=()) -> int:
    """Bytes of the tensors autograd saves while ``fn`` runs (each storage once), leaving out
    the ``resident`` tensors (model weights, which a matmul saves by reference)."""
    skip = {t.untyped_storage()._cdata for t in resident}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage()._cdata  # the storage itself, not its Python wrapper
        if key not in skip:
            seen[key] = max(seen.get(key, 0), t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_saved_bytes_per_action_token_stay_within_the_logits_at_152k(dtype, with_entropy):
    batch, tokens = 4, 64
    logits = torch.empty(batch, tokens, VOCAB, dtype=dtype, device="meta", requires_grad=True)
    targets = torch.zeros(batch, tokens, dtype=torch.long, device="meta")
    mask = torch.ones(batch, tokens, dtype=torch.bool, device="meta")

    def run():
        logp, entropy = log_probs_and_entropy(
            logits, targets, mask, temperature=0.7, with_entropy=with_entropy
        )
        return logp.sum() + (entropy.sum() if entropy is not None else 0)

    per_token = saved_bytes(run) / (batch * tokens)
    # The budget: the logits in their own dtype (the LM head's output) plus 32 bytes. Float32
    # log_softmax alone kept 4 bytes per entry (608 KB per token at bf16 logits' 304 KB), and an
    # entropy bonus about three times more.
    budget = VOCAB * logits.element_size() + 32
    assert per_token <= budget, (per_token, budget)


@pytest.mark.parametrize("with_entropy", [False, True])
def test_chunked_log_probs_and_gradients_equal_log_softmax(with_entropy):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 70, 500, generator=gen) * 3  # 210 rows: several chunks
    targets = torch.randint(0, 500, (3, 70), generator=gen)
    mask = torch.rand(3, 70, generator=gen) > 0.2
    weights = torch.randn(2, 3, 70, generator=gen)
    ours = logits.clone().requires_grad_()
    logp, entropy = log_probs_and_entropy(
        ours, targets, mask, temperature=0.7, with_entropy=with_entropy
    )
    exact = logits.double().requires_grad_()
    logp_all = torch.log_softmax(exact / 0.7, -1)
    want = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0)
    want_h = -(logp_all.exp() * logp_all).sum(-1).masked_fill(~mask, 0)
    loss = (logp * weights[0]).sum() + ((entropy * weights[1]).sum() if with_entropy else 0)
    want_loss = (want * weights[0]).sum() + ((want_h * weights[1]).sum() if with_entropy else 0)
    loss.backward()
    want_loss.backward()
    torch.testing.assert_close(logp.double(), want, atol=1e-5, rtol=0)
    if with_entropy:
        torch.testing.assert_close(entropy.double(), want_h, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.grad.double(), exact.grad, atol=2e-5, rtol=0)
