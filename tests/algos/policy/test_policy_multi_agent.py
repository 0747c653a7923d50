"""MultiAgentPolicy: generation, log-prob consistency, adapters, sharing, heterogeneity, freezing."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from marft_algos.policy import AgentSpec, LoraSettings, MultiAgentPolicy
from marft_algos.policy.forward import left_pad
from marft_algos.protocols import GenerationSettings

#: Observations of mixed lengths, as an env would emit them.
OBSERVATIONS = [
    [
        {"role": "system", "content": "You are the reasoner."},
        {"role": "user", "content": "What is 12 + 35?"},
    ],
    [
        {"role": "system", "content": "You are the reasoner."},
        {"role": "user", "content": "Compute \\frac{1}{2} + \\frac{1}{3} and put it in \\boxed{}."},
    ],
    [{"role": "user", "content": "7"}],
    [
        {"role": "system", "content": "You are the actor."},
        {"role": "user", "content": "Problem: 2x + 3 = 11.\nReasoner: x = 4, so the answer is 4."},
    ],
]


#: Rollout log-probs vs. recomputation in a differently padded batch (float32 on CPU).
LOGP_TOL = 1e-5


def _policy(path, agents=("reasoner", "actor"), **kwargs) -> MultiAgentPolicy:
    kwargs.setdefault("seed", 0)
    return MultiAgentPolicy.from_pretrained(str(path), list(agents), **kwargs)


def _train_step(policy: MultiAgentPolicy, agent: str, gens, lr: float = 1e-2) -> None:
    """One Adam step raising the log-prob of the given actions (moves LoRA B off zero)."""
    opt = torch.optim.Adam(policy.trainable_parameters(agent), lr=lr)
    logp, _, mask = policy.token_log_probs(
        agent, [g.prompt_ids for g in gens], [g.action_ids for g in gens]
    )
    (-(logp * mask).sum()).backward()
    opt.step()
    opt.zero_grad()


def _logp(policy, agent, gens, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return policy.token_log_probs(
            agent, [g.prompt_ids for g in gens], [g.action_ids for g in gens], **kwargs
        ).log_probs


@pytest.fixture(scope="module")
def policy(tiny_path) -> MultiAgentPolicy:
    return _policy(tiny_path)


@pytest.fixture(scope="module")
def gens(policy):
    return policy.generate("reasoner", OBSERVATIONS, GenerationSettings(max_new_tokens=10, seed=0))


def test_generation_fields(policy, gens):
    tokenizer = policy.tokenizer("reasoner")
    assert len(gens) == len(OBSERVATIONS)
    assert len({len(g.prompt_ids) for g in gens}) > 1  # mixed prompt lengths
    for obs, g in zip(OBSERVATIONS, gens, strict=True):
        assert g.prompt_ids == policy.render("reasoner", obs)
        assert 1 <= len(g.action_ids) <= 10
        assert len(g.log_probs) == len(g.action_ids)
        assert all(lp <= 0.0 for lp in g.log_probs)
        assert tokenizer.pad_token_id not in g.action_ids[:-1]
        ends_with_eos = g.action_ids[-1] == tokenizer.eos_token_id
        assert g.finished == ends_with_eos
        if not g.finished:
            assert len(g.action_ids) == 10
        assert g.text == tokenizer.decode(g.action_ids, skip_special_tokens=True)
        assert g.agent == "reasoner"


def test_rollout_log_probs_equal_recomputation(policy, gens):
    # Recompute in reversed order (different padding per row) and one sample at a time.
    rev = list(reversed(gens))
    batched = _logp(policy, "reasoner", rev)
    for i, g in enumerate(rev):
        row = batched[i, : len(g.action_ids)]
        assert torch.allclose(row, torch.tensor(g.log_probs), atol=LOGP_TOL, rtol=0)
        single = _logp(policy, "reasoner", [g])[0]
        assert (single - torch.tensor(g.log_probs)).abs().max().item() < LOGP_TOL


def test_log_probs_are_recorded_while_decoding_without_a_second_forward(tiny_path, monkeypatch):
    # The prompts' prefill (shared beginnings, then batches of similar lengths), then one call per
    # decode step (until the host's next look at the rows): nothing runs afterwards to recompute
    # log-probs.
    from marft_algos.policy import kv_cache

    policy = _policy(tiny_path)
    calls: list[tuple[int, int]] = []
    prefills: list[int] = []
    real = kv_cache.last_token_logits
    monkeypatch.setattr(
        kv_cache,
        "last_token_logits",
        lambda model, **kw: prefills.append(len(calls)) or real(model, **kw),
    )
    causal_lm = policy.backbone("reasoner").model.get_base_model()
    hook = causal_lm.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        gens = policy.generate(
            "reasoner", OBSERVATIONS, GenerationSettings(max_new_tokens=8, seed=5)
        )
    finally:
        hook.remove()
    steps = max(len(g.action_ids) for g in gens)
    assert prefills == list(range(len(prefills)))  # every prefill comes before any decode step
    decoded = calls[len(prefills) :]
    assert steps - 1 <= len(decoded) <= 8 - 1
    assert all(n <= len(OBSERVATIONS) and width == 1 for n, width in decoded)
    recomputed = _logp(policy, "reasoner", gens)
    for i, g in enumerate(gens):
        assert (
            recomputed[i, : len(g.log_probs)] - torch.tensor(g.log_probs)
        ).abs().max() < LOGP_TOL


def test_log_probs_match_the_sampling_distribution(tiny_path):
    # The distribution generate() samples from is softmax(logits / T) (no hidden Hub defaults
    # such as top_k=50); the reported log-probs are of exactly that distribution.
    policy = _policy(tiny_path, temperature=0.7)
    backbone = policy.backbone("actor")
    gens = policy.generate("actor", OBSERVATIONS, GenerationSettings(max_new_tokens=6, seed=3))
    ids, mask = left_pad([g.prompt_ids for g in gens], backbone.pad_id, "cpu")
    with policy.acting("actor") as model, torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(0)
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=6,
            do_sample=True,
            temperature=0.7,
            top_k=0,
            top_p=1.0,
            output_scores=True,
            return_dict_in_generate=True,
            eos_token_id=backbone.eos_ids,
            pad_token_id=backbone.pad_id,
        )
    scores = torch.stack(out.scores, 1).log_softmax(-1)  # (batch, steps, vocab)
    sampled = out.sequences[:, ids.shape[1] :]
    for i in range(len(gens)):
        n = next((t + 1 for t, tok in enumerate(sampled[i].tolist()) if tok in backbone.eos_ids), 6)
        expected = scores[i, torch.arange(n), sampled[i, :n]]
        got = _logp(policy, "actor", [gens[i]._replace(action_ids=sampled[i, :n].tolist())])[0]
        assert (got - expected).abs().max().item() < LOGP_TOL


def test_seeded_sampling_is_reproducible(policy):
    a = policy.generate("actor", OBSERVATIONS, GenerationSettings(max_new_tokens=8, seed=11))
    b = policy.generate("actor", OBSERVATIONS, GenerationSettings(max_new_tokens=8, seed=11))
    c = policy.generate(
        "actor",
        OBSERVATIONS,
        GenerationSettings(max_new_tokens=8),
        generator=torch.Generator().manual_seed(5),
    )
    d = policy.generate(
        "actor",
        OBSERVATIONS,
        GenerationSettings(max_new_tokens=8),
        generator=torch.Generator().manual_seed(5),
    )
    assert [g.action_ids for g in a] == [g.action_ids for g in b]
    assert [g.action_ids for g in c] == [g.action_ids for g in d]
    assert [g.action_ids for g in a] != [g.action_ids for g in c]
    torch.manual_seed(2)
    e = policy.generate("actor", OBSERVATIONS, GenerationSettings(max_new_tokens=8))
    torch.manual_seed(2)
    f = policy.generate("actor", OBSERVATIONS, GenerationSettings(max_new_tokens=8))
    assert [g.action_ids for g in e] == [g.action_ids for g in f]


def test_greedy_generation_is_deterministic(policy):
    a = policy.generate(
        "actor", OBSERVATIONS, GenerationSettings(max_new_tokens=8, do_sample=False)
    )
    b = policy.generate(
        "actor", OBSERVATIONS[::-1], GenerationSettings(max_new_tokens=8, do_sample=False)
    )
    assert [g.action_ids for g in a] == [g.action_ids for g in b[::-1]]


def test_entropy_and_gradients_reach_only_the_agents_adapter(tiny_path):
    policy = _policy(tiny_path)
    gens = policy.generate(
        "reasoner", OBSERVATIONS[:2], GenerationSettings(max_new_tokens=5, seed=0)
    )
    logp, entropy, mask = policy.token_log_probs(
        "reasoner", [g.prompt_ids for g in gens], [g.action_ids for g in gens], with_entropy=True
    )
    assert logp.shape == entropy.shape == mask.shape == (2, max(len(g.action_ids) for g in gens))
    assert (entropy[mask] > 0).all() and (entropy[~mask] == 0).all()
    (logp.sum() + entropy.sum()).backward()
    reasoner = policy.trainable_parameters("reasoner")
    assert reasoner and any(p.grad is not None and p.grad.abs().sum() > 0 for p in reasoner)
    assert all(p.grad is None for p in policy.trainable_parameters("actor"))
    base = policy.backbone("reasoner").model.get_base_model()
    assert all(p.grad is None for n, p in base.named_parameters() if "lora_" not in n)


def test_adapter_isolation(tiny_path):
    policy = _policy(tiny_path)
    gens = policy.generate("reasoner", OBSERVATIONS, GenerationSettings(max_new_tokens=6, seed=1))
    before_a = _logp(policy, "reasoner", gens)
    before_b = _logp(policy, "actor", gens)
    greedy_b = policy.generate(
        "actor", OBSERVATIONS, GenerationSettings(max_new_tokens=6, do_sample=False)
    )
    _train_step(policy, "reasoner", gens)
    assert (_logp(policy, "reasoner", gens) - before_a).abs().max() > 1e-3
    assert torch.equal(_logp(policy, "actor", gens), before_b)
    again_b = policy.generate(
        "actor", OBSERVATIONS, GenerationSettings(max_new_tokens=6, do_sample=False)
    )
    assert [g.action_ids for g in again_b] == [g.action_ids for g in greedy_b]


def test_shared_adapter_shares_parameters(tiny_path):
    specs = {"reasoner": AgentSpec(adapter="team"), "actor": AgentSpec(adapter="team")}
    policy = _policy(tiny_path, specs=specs)
    pr, pa = policy.trainable_parameters("reasoner"), policy.trainable_parameters("actor")
    assert pr and all(a is b for a, b in zip(pr, pa, strict=True)) and len(pr) == len(pa)
    assert len(policy.parameters()) == len(pr)
    assert policy.adapter_groups() == {(str(tiny_path), "team"): ["reasoner", "actor"]}
    gens = policy.generate("reasoner", OBSERVATIONS, GenerationSettings(max_new_tokens=5, seed=0))
    before = _logp(policy, "actor", gens)
    _train_step(policy, "reasoner", gens)
    assert torch.allclose(_logp(policy, "actor", gens), _logp(policy, "reasoner", gens))
    assert (_logp(policy, "actor", gens) - before).abs().max() > 1e-3


def test_conflicting_shared_specs_are_rejected(tiny_path):
    specs = {
        "reasoner": AgentSpec(adapter="team"),
        "actor": AgentSpec(adapter="team", trainable=False),
    }
    with pytest.raises(ValueError, match="share adapter 'team'"):
        _policy(tiny_path, specs=specs)
    with pytest.raises(ValueError, match="unknown agents"):
        _policy(tiny_path, specs={"critic": AgentSpec()})
    with pytest.raises(KeyError, match="Unknown agent"):
        _policy(tiny_path).tokenizer("nobody")


def test_heterogeneous_agents_with_different_tokenizers(tiny_path, tiny_path_b):
    specs = {"actor": AgentSpec(model=str(tiny_path_b))}
    policy = _policy(tiny_path, specs=specs, lora=LoraSettings(r=4, alpha=8))
    tok_r, tok_a = policy.tokenizer("reasoner"), policy.tokenizer("actor")
    assert len(tok_r) != len(tok_a)
    assert len(policy.backbones) == 2
    obs = OBSERVATIONS[1]
    assert policy.render("reasoner", obs) != policy.render("actor", obs)
    gr = policy.generate("reasoner", OBSERVATIONS, GenerationSettings(max_new_tokens=5, seed=0))
    ga = policy.generate("actor", OBSERVATIONS, GenerationSettings(max_new_tokens=5, seed=0))
    assert all(max(g.action_ids) < len(tok_a) for g in ga)
    assert all(
        g.prompt_ids == policy.render("actor", o) for g, o in zip(ga, OBSERVATIONS, strict=True)
    )
    for agent, gens in (("reasoner", gr), ("actor", ga)):
        diff = _logp(policy, agent, gens)[0, : len(gens[0].log_probs)] - torch.tensor(
            gens[0].log_probs
        )
        assert diff.abs().max() < LOGP_TOL
    ids_r = {id(p) for p in policy.trainable_parameters("reasoner")}
    assert not ids_r & {id(p) for p in policy.trainable_parameters("actor")}
    before = _logp(policy, "actor", ga)
    _train_step(policy, "reasoner", gr)
    assert torch.equal(_logp(policy, "actor", ga), before)


def test_reference_is_the_base_model_without_adapters(tiny_path):
    policy = _policy(tiny_path)
    gens = policy.generate("reasoner", OBSERVATIONS, GenerationSettings(max_new_tokens=6, seed=2))
    ref = _logp(policy, "reasoner", gens, reference=True)
    # LoRA B starts at zero: before any update the policy is the reference.
    assert (_logp(policy, "reasoner", gens) - ref).abs().max() < LOGP_TOL
    # ... and the reference is the plain base model, loaded separately.
    base = AutoModelForCausalLM.from_pretrained(tiny_path).eval()
    from marft_algos.policy.forward import action_logits, log_probs_and_entropy, pack

    batch = pack([g.prompt_ids for g in gens], [g.action_ids for g in gens], 0, "cpu")
    with torch.no_grad():
        plain, _ = log_probs_and_entropy(
            action_logits(base, batch), batch.action_ids, batch.action_mask
        )
    assert (plain - ref).abs().max() < LOGP_TOL
    _train_step(policy, "reasoner", gens)
    assert (_logp(policy, "reasoner", gens) - ref).abs().max() > 1e-3
    assert (_logp(policy, "reasoner", gens, reference=True) - ref).abs().max() < LOGP_TOL


def test_frozen_agents_act_but_never_train(tiny_path, tmp_path):
    # Save a non-trivial adapter to start a frozen agent from it.
    donor = _policy(tiny_path, agents=["donor"])
    donor_gens = donor.generate("donor", OBSERVATIONS, GenerationSettings(max_new_tokens=5, seed=0))
    _train_step(donor, "donor", donor_gens)
    donor.save_adapters(tmp_path / "donor")
    specs = {
        "critic_agent": AgentSpec(trainable=False),  # plain base model, no adapter
        "judge": AgentSpec(trainable=False, adapter_path=str(tmp_path / "donor" / "donor")),
    }
    policy = _policy(tiny_path, agents=["reasoner", "critic_agent", "judge"], specs=specs)
    assert policy.adapter_name("critic_agent") is None and policy.adapter_name("judge") == "judge"
    assert policy.trainable_parameters("critic_agent") == []
    assert policy.trainable_parameters("judge") == []
    judge_params = policy.backbone("judge").adapter_parameters("judge")
    assert judge_params and not any(p.requires_grad for p in judge_params)
    assert torch.allclose(
        _logp(policy, "judge", donor_gens), _logp(donor, "donor", donor_gens), atol=LOGP_TOL
    )
    # The loaded adapter is not the base model (the donor was trained one step).
    assert (
        _logp(policy, "judge", donor_gens) - _logp(policy, "critic_agent", donor_gens)
    ).abs().max() > 1e-3
    snapshot = [p.detach().clone() for p in judge_params]
    frozen_before = _logp(policy, "critic_agent", donor_gens)
    gens = policy.generate("reasoner", OBSERVATIONS, GenerationSettings(max_new_tokens=5, seed=0))
    for _ in range(3):
        _train_step(policy, "reasoner", gens)
        # Frozen agents still act, and their forward passes build no graph.
        policy.generate("judge", OBSERVATIONS[:1], GenerationSettings(max_new_tokens=3, seed=0))
        assert not policy.token_log_probs(
            "judge", [gens[0].prompt_ids], [gens[0].action_ids]
        ).log_probs.requires_grad
    assert all(torch.equal(a, b) for a, b in zip(snapshot, judge_params, strict=True))
    assert not any(p.requires_grad for p in judge_params)
    assert torch.equal(_logp(policy, "critic_agent", donor_gens), frozen_before)
    # The adapter-less frozen agent generates exactly like the plain base model.
    base = AutoModelForCausalLM.from_pretrained(tiny_path).eval()
    greedy = policy.generate(
        "critic_agent", OBSERVATIONS[:1], GenerationSettings(max_new_tokens=6, do_sample=False)
    )[0]
    ids = torch.tensor([greedy.prompt_ids])
    tok = policy.tokenizer("critic_agent")
    with torch.no_grad():
        out = base.generate(
            ids,
            max_new_tokens=6,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    assert out[0, ids.shape[1] :].tolist()[: len(greedy.action_ids)] == greedy.action_ids


def test_save_and_load_adapters(tiny_path, tmp_path):
    policy = _policy(tiny_path)
    gens = policy.generate("reasoner", OBSERVATIONS, GenerationSettings(max_new_tokens=6, seed=0))
    _train_step(policy, "reasoner", gens)
    _train_step(policy, "actor", gens)
    greedy = {
        a: policy.generate(a, OBSERVATIONS, GenerationSettings(max_new_tokens=8, do_sample=False))
        for a in policy.agents
    }
    policy.save_adapters(tmp_path / "adapters")
    assert (tmp_path / "adapters" / "reasoner" / "adapter_model.safetensors").exists()

    fresh = _policy(tiny_path, seed=123)
    fresh.load_adapters(tmp_path / "adapters")
    for agent in policy.agents:
        again = fresh.generate(
            agent, OBSERVATIONS, GenerationSettings(max_new_tokens=8, do_sample=False)
        )
        assert [g.action_ids for g in again] == [g.action_ids for g in greedy[agent]]
        assert torch.equal(_logp(fresh, agent, gens), _logp(policy, agent, gens))

    # Each adapter folder is a plain peft adapter.
    base = AutoModelForCausalLM.from_pretrained(tiny_path)
    peft_model = PeftModel.from_pretrained(base, tmp_path / "adapters" / "actor", is_trainable=True)
    assert any(p.requires_grad for p in peft_model.parameters())
    from marft_algos.policy.forward import action_logits, log_probs_and_entropy, pack

    batch = pack([g.prompt_ids for g in gens], [g.action_ids for g in gens], 0, "cpu")
    with torch.no_grad():
        lp, _ = log_probs_and_entropy(
            action_logits(peft_model.eval(), batch), batch.action_ids, batch.action_mask
        )
    assert (lp - _logp(policy, "actor", gens)).abs().max() < LOGP_TOL


def test_load_adapters_rejects_other_lora_settings(tiny_path, tmp_path):
    _policy(tiny_path).save_adapters(tmp_path / "a")
    other = _policy(tiny_path, lora=LoraSettings(r=4, target_modules=["q_proj", "v_proj"]))
    with pytest.raises(ValueError, match="does not match"):
        other.load_adapters(tmp_path / "a")


def test_settings_cap_each_agent_and_refuse_two_seeds(policy):
    settings = GenerationSettings(max_new_tokens=8, max_new_tokens_per_agent={"actor": 2}, seed=0)
    assert all(len(g.action_ids) <= 2 for g in policy.generate("actor", OBSERVATIONS, settings))
    with pytest.raises(ValueError, match=r"generator or settings\.seed \(got seed=0\)"):
        policy.generate("actor", OBSERVATIONS, settings, generator=torch.Generator())


def test_log_probs_with_uncut_come_from_one_forward_pass(tiny_path):
    # The cut log-probs are token_log_probs' under the cut; the uncut ones are its under the
    # temperature alone (the policy side of the KL terms), and both carry gradients.
    policy = MultiAgentPolicy.from_pretrained(str(tiny_path), ["agent"], seed=0)
    gens = policy.generate(
        "agent", [[{"role": "user", "content": "Hi"}]] * 2, GenerationSettings(max_new_tokens=5)
    )
    prompts, actions = [g.prompt_ids for g in gens], [g.action_ids for g in gens]
    cut, uncut = policy.token_log_probs_with_uncut(
        "agent", prompts, actions, temperature=0.7, top_k=3, top_p=0.9
    )
    want_cut = policy.token_log_probs(
        "agent", prompts, actions, temperature=0.7, top_k=3, top_p=0.9
    )
    want_uncut = policy.token_log_probs("agent", prompts, actions, temperature=0.7)
    torch.testing.assert_close(cut.log_probs, want_cut.log_probs, rtol=0, atol=0)
    assert uncut is not None and uncut.requires_grad
    torch.testing.assert_close(uncut, want_uncut.log_probs, rtol=0, atol=0)
    finite = cut.mask & torch.isfinite(cut.log_probs)
    assert bool((cut.log_probs[finite] >= uncut[finite]).all())  # the cut renormalises upwards
