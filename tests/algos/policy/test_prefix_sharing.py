"""Prompts that begin alike are prefilled once: within a call, across calls (the prefix store,
tied to the weights that computed it), and in the update (with the gradient of the shared part
summed over the rows that continue it)."""

from __future__ import annotations

import pytest
import torch
from update_checks import assert_shared_update_equals_padded

from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.prefix_cache import (
    PrefixStore,
    SharedGroup,
    common_length,
    shared_prefix_groups,
    weights_fingerprint,
)
from marft_algos.protocols import GenerationSettings

#: Rollout log-probs vs. recomputation in a differently laid out batch (float32 on CPU).
LOGP_TOL = 1e-5

SYSTEM = (
    "You are the router of a support desk. Read the ticket and name the one department that "
    "should answer it: billing, accounts or shipping."
)
TICKETS = [
    "My card was charged twice for order 12.",
    "I cannot log in since yesterday.",
    "Where is my parcel? It left the depot on Monday and has not arrived.",
    "Please change the e-mail on my account.",
    "Refund?",
]
SAMPLING = [
    {"do_sample": False},
    {"temperature": 1.0},
    {"temperature": 0.7, "top_k": 20},
    {"temperature": 1.3, "top_p": 0.9},
]


def _obs(ticket: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ticket}]


def _policy(path) -> MultiAgentPolicy:
    policy = MultiAgentPolicy.from_pretrained(str(path), ["router"], seed=0)
    # Move the adapter off the identity, so a stale cache would show.
    gens = policy.generate("router", [_obs(TICKETS[0])], GenerationSettings(max_new_tokens=4))
    _step(policy, gens, lr=5e-2)
    return policy


def _step(policy, gens, lr: float) -> None:
    opt = torch.optim.Adam(policy.trainable_parameters("router"), lr=lr)
    logp = policy.token_log_probs(
        "router", [g.prompt_ids for g in gens], [g.action_ids for g in gens]
    ).log_probs
    (-logp.sum()).backward()
    opt.step()
    opt.zero_grad()


def _recomputed(policy, gens) -> list[torch.Tensor]:
    with torch.no_grad():
        out = policy.token_log_probs(
            "router",
            [g.prompt_ids for g in gens],
            [g.action_ids for g in gens],
            temperature=gens[0].temperature,
            top_k=gens[0].top_k,
            top_p=gens[0].top_p,
        )
    return [out.log_probs[i, out.mask[i]] for i in range(len(gens))]


def _forward_widths(policy, run):
    calls: list[tuple[int, int]] = []
    causal_lm = policy.backbone("router").model.get_base_model()
    hook = causal_lm.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        out = run()
    finally:
        hook.remove()
    return out, calls


# ------------------------------------------------------------------ the plan, by hand


def test_common_length():
    assert common_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_length([1, 2], [1, 2, 3]) == 2
    assert common_length([], [1]) == 0
    assert common_length([5], [6]) == 0


def test_shared_prefix_groups_by_hand():
    a = [1] * 20 + [2, 3]
    b = [1] * 20 + [4]
    c = [1] * 18 + [9, 9, 9]  # shares 18 with a and b
    d = [7] * 30  # shares nothing
    e = [1] * 5  # shares 5: below the threshold
    groups = shared_prefix_groups([a, b, c, d, e], min_shared=16)
    # Sorted: e, a, b, c, d. e shares 5 with a (alone); a, b, c share 18; d alone.
    assert sorted(groups) == sorted(
        [SharedGroup(0, [4]), SharedGroup(18, [0, 1, 2]), SharedGroup(0, [3])]
    )
    # Each member keeps at least its last token of its own.
    assert shared_prefix_groups([[1] * 20, [1] * 25], min_shared=16) == [SharedGroup(19, [0, 1])]
    # Every index exactly once.
    assert sorted(i for g in groups for i in g.members) == [0, 1, 2, 3, 4]


def _cache(n: int):
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    cache.update(torch.randn(1, 1, n, 2), torch.randn(1, 1, n, 2), 0)
    return cache


def test_prefix_store_keeps_the_longest_and_evicts_the_least_recently_used():
    store = PrefixStore(max_tokens=60, min_shared=4)
    store.validate("k", 1)
    kept = _cache(20)
    store.add("k", list(range(20)), kept)
    length, cache = store.longest("k", [*range(10), 99])
    assert length == 10 and torch.equal(cache.layers[0].keys, kept.layers[0].keys)
    assert cache.layers[0].keys.data_ptr() != kept.layers[0].keys.data_ptr()  # its own copy
    assert store.longest("k", [99] * 30) == (0, None)
    assert store.longest("other", list(range(20))) == (0, None)  # another state's entries
    # A prompt it extends replaces it; one it already holds adds nothing.
    store.add("k", list(range(30)), _cache(30))
    store.add("k", list(range(25)), _cache(25))
    assert len(store) == 1 and store.tokens == 30
    # Over budget: the least recently used goes first.
    store.add("k", [100 + i for i in range(20)], _cache(20))
    store.longest("k", list(range(31)))  # the 30-token entry is used: now the most recent
    store.add("k", [200 + i for i in range(20)], _cache(20))
    assert store.tokens == 50 and ("k", tuple(range(30))) in store._entries
    # A different fingerprint drops the key's entries.
    store.validate("k", 2)
    assert len(store) == 0 and store.tokens == 0
    assert 0 < store.hit_rate() < 1


def test_the_fingerprint_moves_with_an_optimizer_step_and_a_load(tiny_path):
    policy = _policy(tiny_path)
    model = policy.backbone("router").model
    before = weights_fingerprint(model)
    assert weights_fingerprint(model) == before
    gens = policy.generate("router", [_obs(TICKETS[1])], GenerationSettings(max_new_tokens=3))
    _step(policy, gens, lr=1e-3)
    after_step = weights_fingerprint(model)
    assert after_step != before
    state = {n: p.detach().clone() for n, p in model.named_parameters() if "lora" in n}
    model.load_state_dict(state, strict=False)
    assert weights_fingerprint(model) != after_step


# ------------------------------------------------------------------ rollouts


@pytest.mark.parametrize("sampling", SAMPLING, ids=lambda s: ",".join(map(str, s.values())))
def test_shared_beginnings_give_the_tokens_and_log_probs_of_prefilling_each_prompt(
    tiny_path, sampling
):
    policy = _policy(tiny_path)
    # Padded batch: tickets of different lengths, one repeated (a GRPO group).
    obs = [_obs(t) for t in (*TICKETS, TICKETS[2])]
    settings = GenerationSettings(max_new_tokens=8, seed=3, **sampling)
    policy.prefill.take()
    shared, calls = _forward_widths(policy, lambda: policy.generate("router", obs, settings))
    prompts = [g.prompt_ids for g in shared]
    common = min(common_length(prompts[0], p) for p in prompts)
    assert common >= 16
    # The beginning once, then the rest of each distinct prompt, in batches of similar lengths.
    assert calls[0] == (1, common)
    rests = [n for n, width in calls[1:] if width > 1]
    assert sum(rests) == len(TICKETS)
    tokens, saved = policy.prefill.take()
    assert tokens == common + sum(len(p) - common for p in prompts[:-1])
    assert saved == sum(len(p) for p in prompts) - tokens
    for g, r in zip(shared, _recomputed(policy, shared), strict=True):
        torch.testing.assert_close(torch.tensor(g.log_probs), r, atol=LOGP_TOL, rtol=0)
    # Against the reference layout: every distinct prompt prefilled from its first token.
    policy.shared_prefix_tokens, policy.prefix_store_tokens = None, 0
    alone, calls = _forward_widths(policy, lambda: policy.generate("router", obs, settings))
    assert calls[0][1] > common  # no shared beginning ran
    assert policy.prefill.take() == (sum(len(p) for p in prompts[:-1]), len(prompts[-1]))
    for s, a in zip(shared, alone, strict=True):
        assert s.action_ids == a.action_ids
        torch.testing.assert_close(
            torch.tensor(s.log_probs), torch.tensor(a.log_probs), atol=LOGP_TOL, rtol=0
        )


def test_a_later_call_continues_from_the_stored_beginning(tiny_path):
    policy = _policy(tiny_path)
    settings = GenerationSettings(max_new_tokens=6, seed=1)
    policy.generate("router", [_obs(TICKETS[0])], settings)
    policy.prefill.take()
    later, calls = _forward_widths(
        policy, lambda: policy.generate("router", [_obs(TICKETS[3])], settings)
    )
    prompt = later[0].prompt_ids
    first = policy.render("router", _obs(TICKETS[0]))
    common = common_length(first, prompt)
    assert calls[0] == (1, len(prompt) - common)  # only the part the store does not hold
    assert policy.prefill.take() == (len(prompt) - common, common)
    assert policy.prefix_store.hits >= 1
    torch.testing.assert_close(
        torch.tensor(later[0].log_probs), _recomputed(policy, later)[0], atol=LOGP_TOL, rtol=0
    )


def test_a_stored_beginning_never_outlives_its_weights(tiny_path):
    policy = _policy(tiny_path)
    settings = GenerationSettings(max_new_tokens=6, seed=2)
    obs = [_obs(TICKETS[1]), _obs(TICKETS[2])]
    gens = policy.generate("router", obs, settings)
    assert len(policy.prefix_store) > 0
    _step(policy, gens, lr=5e-2)  # a new policy version
    after = policy.generate("router", [_obs(TICKETS[4])], settings)
    # The old entries went: nothing was reused, and the log-probs are the new weights'.
    assert policy.prefix_store.tokens == len(after[0].prompt_ids)
    torch.testing.assert_close(
        torch.tensor(after[0].log_probs), _recomputed(policy, after)[0], atol=LOGP_TOL, rtol=0
    )
    # A stale entry would have given the old weights' beginning: show that it differs.
    policy.prefix_store_tokens = 0
    fresh = policy.generate("router", [_obs(TICKETS[4])], settings)
    assert fresh[0].action_ids == after[0].action_ids


def test_agents_and_adapter_states_keep_their_own_entries(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(str(tiny_path), ["router", "writer"], seed=0)
    settings = GenerationSettings(max_new_tokens=4, seed=0)
    policy.generate("router", [_obs(TICKETS[0])], settings)
    policy.generate("writer", [_obs(TICKETS[0])], settings)
    with policy.untuned(["router"]):
        policy.generate("router", [_obs(TICKETS[0])], settings)
    keys = {key for key, _ in policy.prefix_store._entries}
    assert len(keys) == 3


# ------------------------------------------------------------------ updates


def test_update_over_shared_beginnings_equals_the_padded_update(tiny_path):
    policy = _policy(tiny_path)
    gens = policy.generate(
        "router",
        [_obs(t) for t in (*TICKETS, TICKETS[0])],
        GenerationSettings(max_new_tokens=7, seed=4),
    )
    assert_shared_update_equals_padded(policy, "router", gens, temperature=0.8, top_p=0.95)


# ------------------------------------------------------------------ the critic


def test_a_frozen_critic_computes_each_observation_once_under_the_base_weights(tiny_path):
    from marft_algos.policy.critic import Critic

    policy = _policy(tiny_path)
    critic = Critic(policy, seed=0)
    prompts = [policy.render("router", _obs(t)) for t in (*TICKETS, TICKETS[1])]
    causal_lm = policy.backbone("router").model.get_base_model()
    calls: list[int] = []
    hook = causal_lm.model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        shared = critic.action_values(prompts)
        first = len(calls)
        again = critic.action_values(prompts[::-1])
        assert len(calls) == first  # kept: no forward pass
        # A policy step moves only adapter weights: the critic's features stay.
        gens = policy.generate("router", [_obs(TICKETS[0])], GenerationSettings(max_new_tokens=3))
        _step(policy, gens, lr=5e-2)
        stepped = len(calls)
        critic.action_values(prompts)
        assert len(calls) == stepped
    finally:
        hook.remove()
    critic.share_prompts = False
    padded = critic.action_values(prompts)
    torch.testing.assert_close(shared, padded, atol=1e-5, rtol=0)
    torch.testing.assert_close(again, shared.flip(0), atol=1e-7, rtol=0)
    # A change to the base weights drops the kept features.
    critic.share_prompts = True
    base = next(p for n, p in causal_lm.named_parameters() if "lora_" not in n and p.dim() == 2)
    with torch.no_grad():
        base.mul_(1.5)
    torch.testing.assert_close(
        critic.action_values(prompts), _padded(critic, prompts), atol=1e-5, rtol=0
    )
    assert not torch.allclose(critic.action_values(prompts), shared, atol=1e-3)


def _padded(critic, prompts):
    critic.share_prompts = False
    try:
        return critic.action_values(prompts)
    finally:
        critic.share_prompts = True


def test_greedy_replies_never_continue_from_another_call(tiny_path):
    # Evaluation and serving compare greedy replies word for word across runs: each is computed
    # from its own call alone, whatever the store holds.
    policy = _policy(tiny_path)
    policy.forget_prompts()
    greedy = GenerationSettings(max_new_tokens=6, do_sample=False)
    first = policy.generate("router", [_obs(TICKETS[0])], greedy)
    assert len(policy.prefix_store) == 0
    policy.generate("router", [_obs(TICKETS[0])], GenerationSettings(max_new_tokens=2, seed=0))
    assert len(policy.prefix_store) == 1  # a sampled call keeps its prompt
    again = policy.generate("router", [_obs(TICKETS[0])], greedy)
    assert again[0].action_ids == first[0].action_ids
    assert again[0].log_probs == first[0].log_probs  # bit for bit
