"""The decode loop makes no host synchronisation per token (issue 49).

transformers checks a 2D padding mask on the host at every decode step to decide whether it may
skip the causal mask (one ``aten._local_scalar_dense`` per token: on a GPU the step waits for
the device). :func:`~marft_algos.policy.decoding.decode` passes a ready 4D mask instead; these
tests count the synchronisations of the whole call, the model's forward included, count the
model's forward calls, and compare tokens and log-probs with transformers' own 2D-mask path
(``ready_mask=False``).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.decoding import decode, decode_step_masks, takes_ready_masks
from marft_algos.protocols import GenerationSettings

#: Log-probs of the ready-mask path vs. transformers' 2D-mask path (float32 on CPU).
EQUAL_TOL = 1e-6

OBS_SHORT = [{"role": "user", "content": "What is 12 + 35?"}]
OBS_LONG = [
    {"role": "system", "content": "You are the actor."},
    {"role": "user", "content": "Problem: 2x + 3 = 11. Reply with x."},
]
OBS_MID = [{"role": "user", "content": "Problem: Compute 7 \\times 8."}]


class _ScalarReads(TorchDispatchMode):
    """Counts ``aten._local_scalar_dense``: every ``.item()``, ``bool(tensor)``, ``int(tensor)``."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.startswith("_local_scalar_dense"):
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def builtin() -> MultiAgentPolicy:
    """The packaged ``marft-tiny-math`` (Llama) with a moved adapter: LoRA B != 0."""
    policy = MultiAgentPolicy.from_pretrained("marft-tiny-math", ["agent"], seed=0)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in policy.backbone("agent").model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    return policy


def _without_end_of_turn(policy: MultiAgentPolicy, fn):
    backbone = policy.backbone("agent")
    eos, backbone.eos_ids = backbone.eos_ids, []
    try:
        return fn()
    finally:
        backbone.eos_ids = eos


def _generate_counted(policy: MultiAgentPolicy, observations, max_new_tokens: int) -> int:
    settings = GenerationSettings(max_new_tokens=max_new_tokens, seed=0)
    counter = _ScalarReads()

    def run():
        with counter:
            return policy.generate("agent", observations, settings)

    gens = _without_end_of_turn(policy, run)
    assert [len(g.action_ids) for g in gens] == [max_new_tokens] * len(observations)
    return counter.count


def test_host_syncs_of_generate_do_not_grow_with_the_tokens(builtin):
    # Prompts of different lengths: the batch is left-padded, so transformers' padding check
    # cannot skip the mask (and read it on the host at every step) unless it is given ready.
    observations = [OBS_SHORT, OBS_LONG, OBS_SHORT]
    counts = {n: _generate_counted(builtin, observations, n) for n in (16, 64)}
    # Checks at steps 4, 8 (16 tokens) and 4, 8, 16, 32 (64 tokens): two more; a sync per
    # token would add 48.
    assert counts[64] - counts[16] <= 3, counts


def _decode(policy, prompts, max_new_tokens, *, eos_ids=None, ready_mask=True, seed=0, **kw):
    backbone = policy.backbone("agent")
    torch.manual_seed(seed)
    with backbone.using("agent") as model:
        return decode(
            model,
            prompts,
            max_new_tokens=max_new_tokens,
            pad_id=backbone.pad_id,
            eos_ids=backbone.eos_ids if eos_ids is None else eos_ids,
            ready_mask=ready_mask,
            **kw,
        )


def test_host_syncs_of_decode_do_not_grow_with_the_tokens(builtin):
    prompts = [builtin.render("agent", o) for o in (OBS_SHORT, OBS_LONG, OBS_MID)]
    counts = {}
    for n in (16, 64):
        counter = _ScalarReads()
        with counter:
            out = _decode(builtin, prompts, n, eos_ids=[], top_k=20, top_p=0.9)
        assert [len(a) for a in out.actions] == [n] * len(prompts)
        counts[n] = counter.count
    assert counts[64] - counts[16] <= 3, counts


@pytest.mark.parametrize("max_new_tokens", [16, 64])
def test_one_model_forward_per_decoded_token(builtin, max_new_tokens):
    prompts = [builtin.render("agent", o) for o in (OBS_SHORT, OBS_LONG, OBS_SHORT)]
    calls: list[tuple[int, int]] = []
    causal_lm = builtin.backbone("agent").model.get_base_model()
    hook = causal_lm.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        out = _decode(builtin, prompts, max_new_tokens, eos_ids=[])
    finally:
        hook.remove()
    assert [len(a) for a in out.actions] == [max_new_tokens] * len(prompts)
    steps = [shape for shape in calls if shape[1] == 1]
    # The prefill (two distinct prompts) gives the first token; each later token is one forward
    # of the whole batch.
    assert len(calls) - len(steps) == 2
    assert steps == [(3, 1)] * (max_new_tokens - 1)


def _assert_same(ready, reference) -> None:
    assert ready.actions == reference.actions
    assert ready.finished == reference.finished
    for a, b in zip(ready.log_probs, reference.log_probs, strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=EQUAL_TOL, rtol=0)


CUTS = [
    pytest.param({}, id="plain"),
    pytest.param({"top_k": 12}, id="top_k"),
    pytest.param({"top_p": 0.8, "temperature": 0.7}, id="top_p"),
    pytest.param({"top_k": 30, "top_p": 0.9, "temperature": 1.3}, id="top_k+top_p"),
    pytest.param({"do_sample": False}, id="greedy"),
]

#: Rows of different prompt lengths, with GRPO groups (equal prompts sharing a prefill).
BATCHES = [
    pytest.param(
        (OBS_SHORT, OBS_LONG, OBS_SHORT, OBS_MID, OBS_LONG, OBS_SHORT), id="padded+groups"
    ),
    pytest.param((OBS_LONG, OBS_LONG, OBS_LONG), id="one-group-unpadded"),
]


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("batch", BATCHES)
def test_ready_mask_samples_what_transformers_mask_samples(builtin, cut, batch):
    prompts = [builtin.render("agent", o) for o in batch]
    # No end of turn: every row decodes 40 tokens, past the checks at 4, 8, 16, 32.
    reference = _decode(builtin, prompts, 40, eos_ids=[], ready_mask=False, **cut)
    ready = _decode(builtin, prompts, 40, eos_ids=[], **cut)
    _assert_same(ready, reference)


@pytest.mark.parametrize("cut", CUTS[:3])
def test_ready_mask_equals_transformers_mask_when_rows_end_and_leave(builtin, cut):
    prompts = [builtin.render("agent", o) for o in (OBS_SHORT, OBS_LONG, OBS_MID, OBS_SHORT)]
    free = _decode(builtin, prompts, 24, eos_ids=[], **cut)
    # Ends some rows early (a token the rows drew early on) and leaves others running.
    eos = [free.actions[0][1], free.actions[2][5]]
    reference = _decode(builtin, prompts, 24, eos_ids=eos, ready_mask=False, **cut)
    assert any(reference.finished)
    ready = _decode(builtin, prompts, 24, eos_ids=eos, **cut)
    _assert_same(ready, reference)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_the_tiny_qwen2_takes_the_ready_mask_under_each_attention(tiny_path, implementation):
    policy = MultiAgentPolicy.from_pretrained(str(tiny_path), ["agent"], seed=0)
    backbone = policy.backbone("agent")
    backbone.model.get_base_model().set_attn_implementation(implementation)
    assert backbone.model.config._attn_implementation == implementation
    prompts = [policy.render("agent", o) for o in (OBS_SHORT, OBS_LONG, OBS_SHORT)]
    reference = _decode(policy, prompts, 20, eos_ids=[], ready_mask=False, top_p=0.9)
    counter = _ScalarReads()
    with counter:
        ready = _decode(policy, prompts, 20, eos_ids=[], top_p=0.9)
    _assert_same(ready, reference)
    counts = {20: counter.count}
    counter = _ScalarReads()
    with counter:
        _decode(policy, prompts, 80, eos_ids=[], top_p=0.9)
    assert counter.count - counts[20] <= 3, (counter.count, counts)


def test_generate_is_unchanged_by_the_ready_mask(builtin, monkeypatch):
    # The policy's generate end to end (merged adapter, seeded RNG) against the 2D-mask path.
    import marft_algos.policy.decoding as decoding

    observations = [OBS_SHORT, OBS_LONG, OBS_SHORT, OBS_MID]
    settings = GenerationSettings(max_new_tokens=32, seed=7, top_p=0.95)
    # Both calls prefill alike: neither continues from prompts kept by an earlier call.
    builtin.prefix_store.clear()
    ready = builtin.generate("agent", observations, settings)
    old = decoding.decode
    monkeypatch.setattr(
        "marft_algos.policy.generation.decode",
        lambda *a, **kw: old(*a, **kw, ready_mask=False),
    )
    builtin.prefix_store.clear()
    reference = builtin.generate("agent", observations, settings)
    for r, g in zip(ready, reference, strict=True):
        assert r.action_ids == g.action_ids and r.finished == g.finished
        torch.testing.assert_close(
            torch.tensor(r.log_probs), torch.tensor(g.log_probs), atol=EQUAL_TOL, rtol=0
        )


def test_other_attention_and_sliding_windows_keep_the_2d_mask(builtin):
    # flash-attention takes a 2D mask and sliding-window layers need their own mask: decode
    # hands them the 2D mask as before (tested end to end in test_decoding.py).
    config = builtin.backbone("agent").model.config
    assert takes_ready_masks(config)
    for attention in ("flash_attention_2", "flex_attention"):
        assert not takes_ready_masks(SimpleNamespace(_attn_implementation=attention))
    windowed = SimpleNamespace(_attn_implementation="sdpa", use_sliding_window=True)
    assert not takes_ready_masks(windowed)
    with pytest.raises(ValueError, match="ready_mask=False"):
        decode_step_masks(SimpleNamespace(config=windowed), torch.ones(2, 3), 4)


def test_step_masks_are_the_padding_mask_of_every_step(builtin):
    model = builtin.backbone("agent").model
    prompt_mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    masks = decode_step_masks(model, prompt_mask, 3)  # sdpa: True where a key is attended
    assert masks.shape == (2, 1, 1, 7) and masks.dtype == torch.bool
    assert masks[:, 0, 0].tolist() == [[False, False] + [True] * 5, [True] * 7]
