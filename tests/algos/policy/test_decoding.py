"""The rollout decoder: exact sampling, log-probs recorded while decoding, the merged adapter, a
group's prompt prefilled once (rollout) and run once (update), the in-place KV cache."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from update_checks import assert_shared_update_equals_padded

from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.decoding import FIRST_CHECK, decode, sample_categorical, uniform_draws
from marft_algos.policy.forward import log_probs_and_entropy
from marft_algos.protocols import GenerationSettings

#: Rollout log-probs vs. recomputation in a differently laid out batch (float32 on CPU).
LOGP_TOL = 1e-5

OBS_A = [{"role": "user", "content": "What is 12 + 35?"}]
OBS_B = [
    {"role": "system", "content": "You are the actor."},
    {"role": "user", "content": "Problem: 2x + 3 = 11. Reply with x."},
]


def _policy(path, agents=("agent",)) -> MultiAgentPolicy:
    return MultiAgentPolicy.from_pretrained(str(path), list(agents), seed=0)


def _trained(path) -> MultiAgentPolicy:
    """A policy whose adapter has moved off the identity (LoRA B != 0)."""
    policy = _policy(path)
    gens = policy.generate("agent", [OBS_A, OBS_B], GenerationSettings(max_new_tokens=6, seed=0))
    opt = torch.optim.Adam(policy.trainable_parameters("agent"), lr=5e-2)
    logp = policy.token_log_probs(
        "agent", [g.prompt_ids for g in gens], [g.action_ids for g in gens]
    ).log_probs
    (-logp.sum()).backward()
    opt.step()
    opt.zero_grad()
    return policy


def _recomputed(policy, gens, **kwargs) -> list[torch.Tensor]:
    with torch.no_grad():
        out = policy.token_log_probs(
            "agent", [g.prompt_ids for g in gens], [g.action_ids for g in gens], **kwargs
        )
    return [out.log_probs[i, out.mask[i]] for i in range(len(gens))]


def test_inverse_cdf_draws_exactly_the_distribution():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.299, 0.001, 0.0])
    n = 200_000
    uniforms = torch.rand(n, generator=torch.Generator().manual_seed(0))
    draws = sample_categorical(probs.expand(n, -1), uniforms)
    counts = torch.bincount(draws, minlength=len(probs)).double()
    assert counts[probs == 0].sum() == 0  # zero-probability tokens are never drawn
    freq = counts / n
    sigma = (probs.double() * (1 - probs.double()) / n).sqrt()
    assert ((freq - probs.double()).abs() <= 5 * sigma + 1e-12).all(), (freq, probs)
    # Pearson chi-square over the support: 3 degrees of freedom, far below the 0.1% tail (16.3).
    support = probs > 0
    expected = n * probs[support].double()
    assert float(((counts[support] - expected) ** 2 / expected).sum()) < 16.3
    # The ends of [0, 1) map to the first and last token that has probability.
    edges = sample_categorical(
        probs.expand(3, -1), torch.tensor([0.0, 1.0 - 2**-24, 1.0 - 2**-53], dtype=torch.float64)
    )
    assert edges.tolist() == [5, 1, 1]


def _conditional_rate(weights: torch.Tensor, token: int, lo: float, hi: float, n: int) -> float:
    """How often ``token`` is drawn when ``1 − u`` is uniform on the 2^-53 grid of ``[lo, hi)``."""
    gen = torch.Generator().manual_seed(1)
    span = round((hi - lo) * 2**53)
    k = torch.randint(0, span, (n,), generator=gen, dtype=torch.int64)
    s = lo + k.double() * 2.0**-53  # 1 − u, exact on the grid
    hits = sum(
        int((sample_categorical(weights.expand(len(part), -1), 1.0 - part) == token).sum())
        for part in s.split(2_000)
    )
    return hits / n


@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_token_of_probability_1e_9_is_drawn_at_its_rate(where):
    # Conditioned on a window of 1e-8 of the mass around the token, it is drawn a tenth of the
    # time. A float32 uniform and cumulative sum (spacing 6e-8 near 1) never draw it.
    gen = torch.Generator().manual_seed(0)
    weights = torch.softmax(3 * torch.randn(2_000, generator=gen), -1)  # float32
    token = 1_999 if where == "last" else 1_200
    weights[token] = 0.0
    weights[token] = float(weights.double().sum()) * 1e-9  # p ≈ 1e-9 of the new total
    exact = weights.double()
    p = float(exact[token] / exact.sum())
    assert p == pytest.approx(1e-9, rel=1e-6)
    start = float(
        exact[:token].sum() / exact.sum()
    )  # the token's interval of 1 − u: (start, start + p]
    window = 1e-8
    lo = max(start + p / 2 - window / 2, 0.0)
    hi = min(lo + window, 1.0)
    lo = hi - window
    n = 100_000
    rate = _conditional_rate(weights.unsqueeze(0), token, lo, hi, n)
    want = p / window
    sigma = math.sqrt(want * (1 - want) / n)
    assert abs(rate - want) <= 5 * sigma, (rate, want)


def test_uniform_draws_have_53_bits():
    torch.manual_seed(0)
    u = uniform_draws(100_000)
    assert u.dtype == torch.float64 and bool(((u >= 0) & (u < 1)).all())
    k = u * 2.0**53
    assert bool((k == k.round()).all())
    # Far finer than float32's 2^-24 grid: most draws are not on it.
    assert float((u * 2.0**24 != (u * 2.0**24).round()).double().mean()) > 0.99


def test_inverse_cdf_takes_unnormalised_weights():
    weights = torch.tensor([[2.0, 0.0, 6.0]])
    assert sample_categorical(weights, torch.tensor([0.8])).tolist() == [0]  # 1 - u = 0.2 < 2/8
    assert sample_categorical(weights, torch.tensor([0.7])).tolist() == [2]


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 6, 1.0), (1.3, 0, 0.8)]
)
def test_merged_adapter_generation_equals_the_unmerged_one(tiny_path, temperature, top_k, top_p):
    policy = _trained(tiny_path)
    settings = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    merged = policy.generate(
        "agent", [OBS_A, OBS_B], GenerationSettings(max_new_tokens=8, seed=3, **settings)
    )
    policy.merge_adapters_for_generation = False
    unmerged = policy.generate(
        "agent", [OBS_A, OBS_B], GenerationSettings(max_new_tokens=8, seed=3, **settings)
    )
    recomputed = _recomputed(policy, merged, **settings)
    for m, u, r in zip(merged, unmerged, recomputed, strict=True):
        assert m.action_ids == u.action_ids and m.finished == u.finished
        assert all(math.isfinite(x) for x in m.log_probs)
        torch.testing.assert_close(
            torch.tensor(m.log_probs), torch.tensor(u.log_probs), atol=LOGP_TOL, rtol=0
        )
        torch.testing.assert_close(torch.tensor(m.log_probs), r, atol=LOGP_TOL, rtol=0)


def test_merged_generation_leaves_the_weights_and_flags_bitwise_unchanged(tiny_path):
    policy = _trained(tiny_path)
    model = policy.backbone("agent").model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    policy.generate("agent", [OBS_A, OBS_B], GenerationSettings(max_new_tokens=5, seed=0))
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert flags == {n: p.requires_grad for n, p in model.named_parameters()}
    # The merge was real: inside it the base weights carry the adapter.
    backbone = policy.backbone("agent")
    lora_linear = next(m for m in model.modules() if hasattr(m, "lora_A") and m.lora_A)
    base_weight = lora_linear.get_base_layer().weight
    with backbone.merged("agent"):
        assert not torch.equal(base_weight, before[_name_of(model, base_weight)])
    assert torch.equal(base_weight, before[_name_of(model, base_weight)])


def test_bf16_generation_keeps_an_adapter_update_below_the_bf16_rounding_of_the_weights(tiny_path):
    # |ΔW| ≈ |W|/1000: rounding W + ΔW to bfloat16 erases most entries, so a merge in 16 bits
    # would sample near the base model while the update runs through the adapter.
    policy = MultiAgentPolicy.from_pretrained(
        str(tiny_path), ["agent"], seed=0, torch_dtype=torch.bfloat16
    )
    backbone = policy.backbone("agent")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in backbone.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 5e-5)
    ids = torch.tensor([[5, 17, 42, 99, 120, 7, 3, 200]])
    with torch.no_grad():
        with backbone.using("agent") as model:
            unmerged = model(ids).logits
        with backbone.merged("agent") as model:
            merged = model(ids).logits
        with backbone.using(None) as model:
            base = model(ids).logits
    assert not torch.equal(unmerged, base)  # the adapter moves the bf16 logits
    assert torch.equal(merged, unmerged)
    settings = GenerationSettings(max_new_tokens=8, seed=3)
    first = policy.generate("agent", [OBS_A, OBS_B], settings)
    policy.merge_adapters_for_generation = False
    second = policy.generate("agent", [OBS_A, OBS_B], settings)
    assert [g.log_probs for g in first] == [g.log_probs for g in second]


def _name_of(model, param) -> str:
    return next(n for n, p in model.named_parameters() if p is param)


def test_each_distinct_prompt_is_prefilled_once_and_rows_share_it(tiny_path):
    policy = _trained(tiny_path)
    calls: list[tuple[int, int]] = []
    causal_lm = policy.backbone("agent").model.get_base_model()
    hook = causal_lm.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        observations = [OBS_A, OBS_B, OBS_A, OBS_A, OBS_B]
        gens = policy.generate("agent", observations, GenerationSettings(max_new_tokens=6, seed=1))
    finally:
        hook.remove()
    len_a, len_b = len(gens[0].prompt_ids), len(gens[1].prompt_ids)
    assert calls[:2] == [(1, len_a), (1, len_b)]  # two prompts, each run once, unpadded
    # Then one token per live row and step.
    assert all(shape[0] <= 5 and shape[1] == 1 for shape in calls[2:])
    for g, r in zip(gens, _recomputed(policy, gens), strict=True):
        torch.testing.assert_close(torch.tensor(g.log_probs), r, atol=LOGP_TOL, rtol=0)


def test_kv_cache_grows_in_place_past_its_first_capacity(tiny_path):
    # With no end-of-turn token every row runs to the cap: far beyond twice the prompt width.
    policy = _trained(tiny_path)
    backbone = policy.backbone("agent")
    width = max(len(policy.render("agent", o)) for o in (OBS_A, OBS_B))
    eos, backbone.eos_ids = backbone.eos_ids, []
    try:
        gens = policy.generate(
            "agent", [OBS_A, OBS_B], GenerationSettings(max_new_tokens=2 * width + 5, seed=2)
        )
    finally:
        backbone.eos_ids = eos
    assert all(len(g.action_ids) == 2 * width + 5 for g in gens)
    for g, r in zip(gens, _recomputed(policy, gens), strict=True):
        torch.testing.assert_close(torch.tensor(g.log_probs), r, atol=LOGP_TOL, rtol=0)


def test_update_with_shared_prompts_equals_the_padded_update(tiny_path):
    policy = _trained(tiny_path)
    gens = policy.generate(
        "agent", [OBS_A, OBS_A, OBS_B, OBS_A], GenerationSettings(max_new_tokens=7, seed=4)
    )
    assert_shared_update_equals_padded(policy, "agent", gens, temperature=0.8)


def test_logged_entropy_equals_the_differentiable_one_without_a_graph():
    logits = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(0), requires_grad=True)
    targets = torch.zeros(2, 3, dtype=torch.long)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    for cut in ({}, {"top_k": 4}, {"top_p": 0.5}):
        _, want = log_probs_and_entropy(logits, targets, mask, with_entropy=True, **cut)
        _, got = log_probs_and_entropy(
            logits, targets, mask, with_entropy=True, differentiable_entropy=False, **cut
        )
        assert want is not None and got is not None
        assert want.requires_grad and not got.requires_grad
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want.detach(), atol=1e-6, rtol=1e-6)


def test_models_without_full_attention_prefill_the_padded_batch(tiny_path, monkeypatch):
    # Sliding-window models keep transformers' own cache and prefill every distinct prompt in one
    # padded batch; log-probs still equal the update's.
    import marft_algos.policy.decoding as decoding

    monkeypatch.setattr(decoding, "full_attention_only", lambda _config: False)
    policy = _trained(tiny_path)
    gens = policy.generate(
        "agent", [OBS_A, OBS_B, OBS_A], GenerationSettings(max_new_tokens=6, seed=5)
    )
    policy.share_prompts_in_update = False
    for g, r in zip(gens, _recomputed(policy, gens), strict=True):
        torch.testing.assert_close(torch.tensor(g.log_probs), r, atol=LOGP_TOL, rtol=0)


def test_a_cut_token_is_never_drawn_when_the_scan_is_not_flat_over_zeros(monkeypatch):
    # A device scan can add round-off inside a run of zero-probability (cut) tokens; without
    # the guard the search then stops on a cut token, whose log-prob is −inf.
    real_cumsum = torch.Tensor.cumsum

    def uneven_cumsum(self, *args, **kwargs):
        out = real_cumsum(self, *args, **kwargs)
        return out + (self == 0) * 1e-9  # each zero entry's sum sits 1e-9 above its predecessor

    probs = torch.tensor([[0.5, 0.0, 0.0, 0.5]] * 3, dtype=torch.float64)
    # 1 − u = 0.5 + 5e-10 falls in the cut tokens' spurious interval (0.5, 0.5 + 1e-9].
    uniforms = 1.0 - torch.tensor([0.5 + 5e-10, 0.25, 0.75], dtype=torch.float64)
    monkeypatch.setattr(torch.Tensor, "cumsum", uneven_cumsum)
    draws = sample_categorical(probs, uniforms)
    assert draws.tolist() == [3, 0, 3]


class _HostSyncs(TorchDispatchMode):
    """Counts the operations that make the host wait for the device (outside paused spans)."""

    SYNCS = ("_local_scalar_dense", "is_nonzero", "nonzero", "item")

    def __init__(self) -> None:
        super().__init__()
        self.count, self.paused = 0, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused and func.__name__.split(".")[0] in self.SYNCS:
            self.count += 1
        return func(*args, **(kwargs or {}))


class _Uncounted(torch.nn.Module):
    """The model, with the syncs of its own forward (transformers' mask checks) not counted."""

    def __init__(self, model, counter: _HostSyncs) -> None:
        super().__init__()
        self.model, self.counter, self.config = model, counter, model.config
        self.batch_sizes: list[int] = []

    def get_input_embeddings(self):  # decode reads the dtype of its masks from it
        return self.model.get_input_embeddings()

    def forward(self, **kwargs):
        if kwargs["input_ids"].shape[1] == 1:  # a decode step (not a prompt's prefill)
            self.batch_sizes.append(kwargs["input_ids"].shape[0])
        self.counter.paused = True
        try:
            return self.model(**kwargs)
        finally:
            self.counter.paused = False


def _decode_counted(policy, prompts, eos_ids, max_new_tokens, **kwargs):
    backbone = policy.backbone("agent")
    counter = _HostSyncs()
    with backbone.using("agent") as model:
        wrapped = _Uncounted(model, counter)
        with counter:
            out = decode(
                wrapped,
                prompts,
                max_new_tokens=max_new_tokens,
                pad_id=backbone.pad_id,
                eos_ids=eos_ids,
                **kwargs,
            )
    return out, counter.count, wrapped.batch_sizes


def test_host_syncs_per_decode_grow_with_the_log_of_the_length_not_the_length(tiny_path):
    policy = _trained(tiny_path)
    prompts = [policy.render("agent", o) for o in (OBS_A, OBS_B)]
    counts = {}
    for n in (16, 64, 256):
        torch.manual_seed(0)
        out, counts[n], _ = _decode_counted(policy, prompts, [], n)  # no row ever ends
        assert [len(a) for a in out.actions] == [n, n]
    # One per check at steps 4, 8, 16, ... (a sync per token would give 16, 64, 256).
    assert counts[64] - counts[16] <= 2 and counts[256] - counts[64] <= 2, counts
    assert counts[256] <= 12, counts


def test_finished_rows_leave_the_batch_and_the_others_decode_as_alone(tiny_path):
    policy = _trained(tiny_path)
    prompts = [policy.render("agent", o) for o in (OBS_A, OBS_B)]
    free = _decode_counted(policy, prompts, [], 24, do_sample=False)[0]
    # An end-of-turn id that row 0 emits first and row 1 never does.
    eos = free.actions[0][0]
    assert eos not in free.actions[1]
    out, _, sizes = _decode_counted(policy, prompts, [eos], 24, do_sample=False)
    assert out.actions[0] == [eos] and out.finished == [True, False]
    assert out.actions[1] == free.actions[1]
    # Both rows run until the first check (step 4); from then on row 1 runs alone.
    assert sizes[: FIRST_CHECK - 1] == [2] * (FIRST_CHECK - 1)
    assert sizes[FIRST_CHECK - 1 :] == [1] * (len(sizes) - FIRST_CHECK + 1)
    torch.testing.assert_close(
        torch.tensor(out.log_probs[1]), torch.tensor(free.log_probs[1]), atol=LOGP_TOL, rtol=0
    )


def test_prompts_of_similar_length_are_prefilled_together(tiny_path):
    policy = _trained(tiny_path)
    questions = [f"What is {a} + {b}?" for a, b in [(12, 35), (7, 81), (40, 11), (3, 99)]]
    obs = [[{"role": "user", "content": q}] for q in questions] + [OBS_B]
    prompts = [policy.render("agent", o) for o in obs]
    widths = sorted({len(p) for p in prompts})
    calls: list[tuple[int, int]] = []
    causal_lm = policy.backbone("agent").model.get_base_model()
    hook = causal_lm.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        gens = policy.generate_from_ids(
            "agent", prompts, GenerationSettings(max_new_tokens=4, seed=1)
        )
    finally:
        hook.remove()
    # The four short prompts in one batch (padded to the widest), the long one alone.
    assert calls[:2] == [(4, max(len(p) for p in prompts[:4])), (1, len(prompts[4]))], widths
    for g, r in zip(gens, _recomputed(policy, gens), strict=True):
        torch.testing.assert_close(torch.tensor(g.log_probs), r, atol=LOGP_TOL, rtol=0)
