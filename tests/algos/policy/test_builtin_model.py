"""The packaged ``marft-tiny-math`` model: name resolution, offline loading, and calibration.

The accuracy bounds are deliberately loose: the model is meant to be neither useless nor perfect
on the held-out built-in problems, so that RL fine-tuning has something to improve.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.pretrained import BUILTIN_MODELS, resolve_model
from marft_algos.rollout.collector import GenerationSettings, RolloutCollector
from marft_algos.rollout.evaluation import NoisyMessages, evaluation_requests, summarize_episodes
from marft_envs.math.data import load_dataset

NAME = "marft-tiny-math"
#: The problems the model was trained and calibrated on (see docs/builtin_model.md).
LEVELS = [1, 2, 3]
SUBJECTS = ["digits"]
NUM_PROBLEMS = 30


def test_short_name_resolves_to_the_packaged_folder() -> None:
    path = Path(resolve_model(NAME))
    assert path == Path(BUILTIN_MODELS[NAME])
    assert path.is_dir()
    assert "marft_algos" in path.parts
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (path / name).is_file(), name


def test_other_names_pass_through_unchanged(tmp_path: Path) -> None:
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model(tmp_path) == str(tmp_path)


def test_loads_offline_with_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = resolve_model(NAME)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    assert model.config.model_type == "llama"
    assert next(model.parameters()).dtype == torch.float32
    assert tokenizer.chat_template
    assert tokenizer.eos_token == "<|im_end|>"
    # Whole numbers up to 999 are single tokens (cut as Llama 3 does), so "7 \\times 8 = 56" is
    # four tokens and arithmetic facts are single-token lookups for a model this small.
    for number in ("0", "7", "56", "999"):
        assert len(tokenizer.encode(number, add_special_tokens=False)) == 1, number
    assert len(tokenizer.encode("1234567", add_special_tokens=False)) == 3
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Problem: Compute 2 + 3."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text.endswith("<|im_start|>assistant\n")
    ids = tokenizer("Problem: Compute 2 + 3.", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits  # (1, T, vocab)
    assert torch.isfinite(logits).all()


def test_untuned_dual_team_is_neither_useless_nor_perfect() -> None:
    dataset = load_dataset("builtin:test", levels=LEVELS, subjects=SUBJECTS)
    env_fn = lambda: marft_envs.make("math-dual-v7", dataset=dataset)  # noqa: E731
    policy = MultiAgentPolicy.from_pretrained(NAME, env_fn().possible_agents, seed=0)
    # The reasoner's worked steps are at most 25 tokens and the actor's \\boxed{} 5.
    settings = GenerationSettings(
        max_new_tokens=32, max_new_tokens_per_agent={"actor": 8}, do_sample=False
    )
    collector = RolloutCollector.from_factory(policy, env_fn, NUM_PROBLEMS, settings)
    episodes = collector.collect(evaluation_requests(collector, NUM_PROBLEMS))
    accuracy = summarize_episodes(episodes, "eval")["eval/accuracy"]
    assert len(episodes) == NUM_PROBLEMS
    assert 0.0 < accuracy < 1.0, accuracy


def _accuracy(policy: object, env_id: str, dataset: object, settings: GenerationSettings) -> float:
    env_fn = lambda: marft_envs.make(env_id, dataset=dataset)  # noqa: E731
    collector = RolloutCollector.from_factory(policy, env_fn, NUM_PROBLEMS, settings)
    episodes = collector.collect(evaluation_requests(collector, NUM_PROBLEMS))
    return summarize_episodes(episodes, "eval")["eval/accuracy"]


def test_a_24_token_budget_gives_the_team_an_edge_that_comes_from_the_reasoner() -> None:
    # The comparison's task (docs/builtin_model.md): a three-step solution with its \\boxed{} line
    # needs 28-29 tokens, its steps alone at most 24. The team splits them over two messages.
    dataset = load_dataset("builtin:test", levels=LEVELS, subjects=SUBJECTS)
    settings = GenerationSettings(max_new_tokens=24, do_sample=False)
    dual = MultiAgentPolicy.from_pretrained(NAME, ["reasoner", "actor"], seed=0)
    single = MultiAgentPolicy.from_pretrained(NAME, ["actor"], seed=0)
    team = _accuracy(dual, "math-dual-v7", dataset, settings)
    alone = _accuracy(single, "math-single-v7", dataset, settings)
    noisy = _accuracy(NoisyMessages(dual, ["reasoner"]), "math-dual-v7", dataset, settings)
    assert team > alone, (team, alone)
    assert noisy <= alone < team, (noisy, alone, team)
