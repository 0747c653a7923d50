"""Critic: value shapes, the token/action value relation, and what trains."""

from __future__ import annotations

import torch

from marft_algos.policy import LoraSettings, MultiAgentPolicy
from marft_algos.policy.critic import Critic

PROMPTS = [[1, 5, 6, 7, 8], [1, 9], [1, 10, 11, 12, 13, 14, 15]]
ACTIONS = [[20, 21, 2], [22], [23, 24, 25, 26]]


def _policy(path) -> MultiAgentPolicy:
    return MultiAgentPolicy.from_pretrained(str(path), ["reasoner", "actor"], seed=0)


def test_shapes_and_token_action_relation(tiny_path):
    critic = Critic(_policy(tiny_path), hidden=64, seed=0)
    values = critic.action_values(PROMPTS)
    assert values.shape == (3,)
    tok = critic.token_values(PROMPTS, ACTIONS)
    assert tok.shape == (3, 4)
    # V(s_0) of the token-level critic is the action-level value of the same observation.
    assert torch.allclose(tok[:, 0], values, atol=1e-6)
    assert tok[1, 1:].abs().sum() == 0 and tok[0, 3] == 0  # padding
    final = critic.token_values(PROMPTS, ACTIONS, include_final=True)
    assert final.shape == (3, 5)
    lengths = torch.tensor([len(a) for a in ACTIONS]).unsqueeze(1)
    before = torch.arange(4).unsqueeze(0) < lengths  # (batch, 4): states before each token
    assert torch.allclose(final[:, :4][before], tok[before], atol=1e-6)
    # The value after the whole action is the action-level value of prompt + action.
    after = critic.action_values([p + a for p, a in zip(PROMPTS, ACTIONS, strict=True)])
    for b, a in enumerate(ACTIONS):
        assert torch.allclose(final[b, len(a)], after[b], atol=1e-5)
    # Values do not depend on how the batch is padded.
    single = critic.token_values([PROMPTS[2]], [ACTIONS[2]])
    assert torch.allclose(single[0], tok[2], atol=1e-5)


def test_gradients_only_on_the_head_and_backbone_frozen(tiny_path):
    policy = _policy(tiny_path)
    critic = Critic(policy, seed=0)
    assert {id(p) for p in critic.parameters()} == {id(p) for p in critic.head.parameters()}
    n_head = sum(p.numel() for p in critic.parameters())
    assert n_head == 64 * 64 + 64 + 64 + 1
    backbone = policy.backbone("reasoner").model
    before = {n: p.detach().clone() for n, p in backbone.named_parameters()}
    opt = torch.optim.Adam(critic.parameters(), lr=1e-2)
    for _ in range(3):
        loss = (critic.token_values(PROMPTS, ACTIONS) - 1.0).pow(2).mean()
        loss = loss + (critic.action_values(PROMPTS) - 1.0).pow(2).mean()
        loss.backward()
        assert all(p.grad is not None for p in critic.parameters())
        assert all(p.grad is None for p in backbone.parameters())
        opt.step()
        opt.zero_grad()
    assert all(torch.equal(before[n], p) for n, p in backbone.named_parameters())
    # The critic read the base with adapters disabled and left the policy untouched.
    with torch.no_grad():
        ref = policy.token_log_probs("reasoner", PROMPTS, ACTIONS, reference=True).log_probs
        cur = policy.token_log_probs("reasoner", PROMPTS, ACTIONS).log_probs
    assert torch.allclose(ref, cur, atol=1e-5)


def test_critic_values_ignore_policy_adapters(tiny_path):
    policy = _policy(tiny_path)
    critic = Critic(policy, seed=0)
    v0 = critic.action_values(PROMPTS).detach()
    opt = torch.optim.Adam(policy.trainable_parameters("reasoner"), lr=1e-1)
    lp = policy.token_log_probs("reasoner", PROMPTS, ACTIONS).log_probs
    (-lp.sum()).backward()
    opt.step()
    assert torch.equal(critic.action_values(PROMPTS).detach(), v0)


def test_lora_critic_trains_its_adapter_only(tiny_path):
    policy = _policy(tiny_path)
    critic = Critic(policy, lora=LoraSettings(r=4), seed=0)
    lora = policy.backbone("actor").adapter_parameters("critic")
    assert lora and len(critic.parameters()) == len(list(critic.head.parameters())) + len(lora)
    assert all(p.requires_grad for p in lora)
    # The policy's agents never see the critic adapter.
    assert not {id(p) for p in lora} & {id(p) for p in policy.parameters()}
    agent_before = [p.detach().clone() for p in policy.parameters()]
    opt = torch.optim.Adam(critic.parameters(), lr=1e-2)
    for _ in range(2):
        # Interleave a policy forward: switching adapters must not freeze the critic's LoRA.
        policy.token_log_probs("actor", PROMPTS, ACTIONS)
        loss = (critic.token_values(PROMPTS, ACTIONS) - 1.0).pow(2).mean()
        loss.backward()
        assert all(p.grad is not None for p in lora)
        opt.step()
        opt.zero_grad()
    assert any(
        p.abs().sum() > 0
        for n, p in critic.backbone.named_adapter_parameters("critic")
        if "lora_B" in n
    )
    assert all(torch.equal(a, b) for a, b in zip(agent_before, policy.parameters(), strict=True))


def test_state_dict_roundtrip_and_separate_backbone(tiny_path):
    a = Critic(str(tiny_path), seed=0)
    b = Critic(str(tiny_path), seed=1)
    assert not torch.equal(a.action_values(PROMPTS), b.action_values(PROMPTS))
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.action_values(PROMPTS), b.action_values(PROMPTS))
    assert all(not p.requires_grad for p in a.backbone.model.parameters())
