"""Checkpoints: full round trip, atomic replacement, and clear errors for incompatible ones."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from marft_algos.policy import AgentSpec, Critic, MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_algos.runs.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_manifest,
    save_checkpoint,
)

OBS = [
    [
        {"role": "system", "content": "You are the reasoner."},
        {"role": "user", "content": "1 + 2 = ?"},
    ],
    [{"role": "user", "content": "Compute \\frac{1}{2} + \\frac{1}{3}."}],
]


@dataclass
class _Config:
    lr: float = 1e-3
    agents: tuple[str, ...] = ("reasoner", "actor")


def _setup(path, seed=0, agents=("reasoner", "actor"), specs=None):
    policy = MultiAgentPolicy.from_pretrained(str(path), list(agents), seed=seed, specs=specs)
    critic = Critic(policy, seed=seed)
    opts = {
        "policy": torch.optim.Adam(policy.parameters(), lr=1e-2),
        "critic": torch.optim.Adam(critic.parameters(), lr=1e-2),
    }
    return policy, critic, opts


def _train(policy, critic, opts):
    gens = policy.generate("reasoner", OBS, GenerationSettings(max_new_tokens=6, seed=0))
    prompts, actions = [g.prompt_ids for g in gens], [g.action_ids for g in gens]
    for agent in policy.agents:
        lp = policy.token_log_probs(agent, prompts, actions).log_probs
        (-lp.sum()).backward()
    (critic.action_values(prompts) - 1).pow(2).mean().backward()
    for opt in opts.values():
        opt.step()
        opt.zero_grad()


def test_round_trip_restores_everything(tiny_path, tmp_path):
    policy, critic, opts = _setup(tiny_path)
    _train(policy, critic, opts)
    _train(policy, critic, opts)
    greedy = {
        a: policy.generate(a, OBS, GenerationSettings(max_new_tokens=8, do_sample=False))
        for a in policy.agents
    }
    values = critic.action_values([[1, 2, 3]]).detach()
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    ckpt = save_checkpoint(
        tmp_path / "ckpt",
        policy,
        critic=critic,
        optimizers=opts,
        state={"step": 2, "cursor": 17, "config": _Config()},
    )
    expected_rng = (random.random(), np.random.rand(), torch.rand(1))
    manifest = read_manifest(ckpt)
    assert manifest["format_version"] == 1 and manifest["agents"] == ["reasoner", "actor"]
    assert manifest["base_models"]["actor"] == str(tiny_path)
    assert manifest["adapters"] == {"reasoner": "reasoner", "actor": "actor"}
    assert all((ckpt / f).is_file() for f in manifest["files"])

    fresh, fresh_critic, fresh_opts = _setup(tiny_path, seed=99)
    state = load_checkpoint(ckpt, fresh, critic=fresh_critic, optimizers=fresh_opts)
    assert state == {
        "step": 2,
        "cursor": 17,
        "config": {"lr": 1e-3, "agents": ["reasoner", "actor"]},
    }
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected_rng
    for agent in policy.agents:
        again = fresh.generate(agent, OBS, GenerationSettings(max_new_tokens=8, do_sample=False))
        assert [g.action_ids for g in again] == [g.action_ids for g in greedy[agent]]
    assert torch.equal(fresh_critic.action_values([[1, 2, 3]]).detach(), values)
    for name, opt in opts.items():
        a, b = opt.state_dict(), fresh_opts[name].state_dict()
        assert a["param_groups"] == b["param_groups"]
        assert a["state"].keys() == b["state"].keys()
        for k in a["state"]:
            for key in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(a["state"][k][key], b["state"][k][key])
    # Training on continues identically from the restored objects.
    _train(policy, critic, opts)
    _train(fresh, fresh_critic, fresh_opts)
    assert all(
        torch.equal(p, q) for p, q in zip(policy.parameters(), fresh.parameters(), strict=True)
    )


def test_overwrite_is_atomic_and_leaves_no_temporaries(tiny_path, tmp_path):
    policy, critic, opts = _setup(tiny_path)
    save_checkpoint(tmp_path / "ckpt", policy, state={"step": 1})
    save_checkpoint(tmp_path / "ckpt", policy, critic=critic, optimizers=opts, state={"step": 2})
    assert json.loads((tmp_path / "ckpt" / "state.json").read_text()) == {"step": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    # A failing save (state not JSON) leaves the previous checkpoint intact.
    with pytest.raises(TypeError, match="JSON-serialisable"):
        save_checkpoint(tmp_path / "ckpt", policy, state={"bad": object()})
    assert json.loads((tmp_path / "ckpt" / "state.json").read_text()) == {"step": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_incompatible_checkpoints_raise_clear_errors(tiny_path, tiny_path_b, tmp_path):
    policy, critic, opts = _setup(tiny_path)
    ckpt = save_checkpoint(tmp_path / "ckpt", policy, critic=critic, optimizers=opts)

    other_agents, _, _ = _setup(tiny_path, agents=("reasoner", "verifier"))
    with pytest.raises(CheckpointError, match=r"agents differ.*'verifier'"):
        load_checkpoint(ckpt, other_agents)

    hetero, _, _ = _setup(tiny_path, specs={"actor": AgentSpec(model=str(tiny_path_b))})
    with pytest.raises(CheckpointError, match=r"base_models differ \(actor"):
        load_checkpoint(ckpt, hetero)

    shared = MultiAgentPolicy.from_pretrained(
        str(tiny_path),
        ["reasoner", "actor"],
        specs={"reasoner": AgentSpec(adapter="team"), "actor": AgentSpec(adapter="team")},
    )
    with pytest.raises(CheckpointError, match="adapters differ"):
        load_checkpoint(ckpt, shared)

    with pytest.raises(CheckpointError, match="critic hidden differs"):
        load_checkpoint(ckpt, policy, critic=Critic(policy, hidden=32))

    with pytest.raises(CheckpointError, match=r"optimizers \['scheduler'\]"):
        load_checkpoint(ckpt, policy, optimizers={"scheduler": opts["policy"]})

    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["format_version"] = 999
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="format version 999"):
        load_checkpoint(ckpt, policy)

    with pytest.raises(CheckpointError, match="not a marft checkpoint"):
        load_checkpoint(tmp_path, policy)
