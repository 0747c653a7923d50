"""What the vLLM rollout backend asks of the engine, checked against a stand-in ``vllm`` module
that records ``LLM(...)``, every ``SamplingParams`` and the sleep calls (the main environment has
no vLLM; the real engine is tested in ``tests/rollout_vllm``)."""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

import pytest
import torch

from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.config import ModelLoadError
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.vllm import VLLMRolloutBackend, VLLMSettings


class FakeLLM:
    """Records its arguments; every request ends at once with the first end-of-turn id."""

    instances: list[FakeLLM] = []
    eos = 0

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.params: list[Any] = []
        self.events: list[str] = []
        self.llm_engine = types.SimpleNamespace(
            add_lora=lambda request: self.events.append("add_lora"),
            remove_lora=lambda lora_id: self.events.append("remove_lora"),
        )
        FakeLLM.instances.append(self)

    def generate(self, prompts, params, lora_request=None, use_tqdm=False):
        self.events.append("generate")
        self.params.extend(params)
        step = {FakeLLM.eos: types.SimpleNamespace(logprob=-0.25)}
        done = types.SimpleNamespace(token_ids=[FakeLLM.eos], logprobs=[step])
        # vLLM reports the prompt tokens its prefix cache held: here all but the last.
        return [
            types.SimpleNamespace(outputs=[done], num_cached_tokens=len(p["prompt_token_ids"]) - 1)
            for p in prompts
        ]

    def sleep(self, level: int = 1) -> None:
        self.events.append(f"sleep{level}")

    def wake_up(self) -> None:
        self.events.append("wake_up")


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


class LoRARequest:
    def __init__(self, name: str, lora_int_id: int, path: str) -> None:
        self.lora_name, self.lora_int_id, self.lora_path = name, lora_int_id, path


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    for name, module in {
        "vllm": vllm,
        "vllm.inputs": inputs,
        "vllm.lora": lora,
        "vllm.lora.request": request,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    FakeLLM.instances.clear()
    return FakeLLM.instances


@pytest.fixture
def policy(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(str(tiny_path), ["agent"], seed=0)
    FakeLLM.eos = policy.backbone("agent").eos_ids[0]
    return policy


OBS = [[{"role": "user", "content": "What is 2 + 2?"}]] * 3


def test_a_hub_id_reaches_the_engine_as_it_is(fake_vllm, policy, monkeypatch):
    # The policy loaded it from the Hugging Face cache; vLLM loads Hub ids the same way.
    monkeypatch.setattr(policy, "base_model_name", lambda agent: "Qwen/Qwen2.5-1.5B-Instruct")
    VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0))
    assert fake_vllm[-1].kwargs["model"] == "Qwen/Qwen2.5-1.5B-Instruct"


@pytest.mark.parametrize("path", ["./models/missing", "/no/such/model/folder"])
def test_a_missing_local_model_path_is_named(fake_vllm, policy, monkeypatch, path):
    monkeypatch.setattr(policy, "base_model_name", lambda agent: path)
    with pytest.raises(ModelLoadError, match=f"Model path '{path}' does not exist"):
        VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0))
    assert not fake_vllm


def test_a_folder_without_config_json_is_refused(fake_vllm, policy, monkeypatch, tmp_path):
    monkeypatch.setattr(policy, "base_model_name", lambda agent: str(tmp_path))
    with pytest.raises(ValueError, match=r"has no config\.json"):
        VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0))


def test_rollouts_carry_no_per_request_seed_unless_asked(fake_vllm, policy):
    backend = VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0))
    generator = torch.Generator().manual_seed(0)
    backend.generate("agent", OBS, GenerationSettings(max_new_tokens=4), generator=generator)
    assert [p.seed for p in fake_vllm[-1].params] == [None] * 3  # vLLM's batched sampler
    # The generator advanced as the policy's generate advances it.
    assert not torch.equal(generator.get_state(), torch.Generator().manual_seed(0).get_state())

    seeded = VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0, seed_requests=True))
    seeded.generate("agent", OBS, GenerationSettings(max_new_tokens=4), generator=torch.Generator())
    seeds = [p.seed for p in fake_vllm[-1].params]
    assert None not in seeds and len(set(seeds)) == 3
    # An explicit seed always seeds the requests.
    backend.generate("agent", OBS, GenerationSettings(max_new_tokens=4, seed=7))
    assert [p.seed for p in fake_vllm[0].params[-3:]] == [7, 8, 9]


def test_engine_knobs_reach_the_engine_from_the_command_line(fake_vllm, policy):
    from marft_algos.cli.train import parse_train_args

    args = parse_train_args(
        [
            "--vllm-enforce-eager",
            "--vllm-sleep-mode",
            "--vllm-max-model-len",
            "4096",
            "--vllm-seed-requests",
            "--vllm-tensor-parallel-size",
            "4",
        ]
    )[0]
    settings = args.vllm_settings()
    VLLMRolloutBackend(policy, dataclasses.replace(settings, probe_tokens=0))
    kwargs = fake_vllm[-1].kwargs
    assert kwargs["enforce_eager"] is True and kwargs["enable_sleep_mode"] is True
    assert kwargs["max_model_len"] == 4096 and settings.seed_requests
    assert kwargs["tensor_parallel_size"] == 4
    assert kwargs["enable_prefix_caching"] is True  # on unless --no-vllm-prefix-caching
    args = parse_train_args(["--no-vllm-prefix-caching"])[0]
    VLLMRolloutBackend(policy, dataclasses.replace(args.vllm_settings(), probe_tokens=0))
    assert fake_vllm[-1].kwargs["enable_prefix_caching"] is False
    # Off by default: vLLM's own defaults.
    VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0))
    assert not {
        "enforce_eager",
        "enable_sleep_mode",
        "max_model_len",
        "tensor_parallel_size",
    } & set(fake_vllm[-1].kwargs)


def test_a_tensor_parallel_size_must_divide_the_processes(monkeypatch):
    from marft_algos.cli.train import UsageError, parse_train_args

    with pytest.raises(ValueError, match="tensor_parallel_size must be >= 1"):
        VLLMSettings(tensor_parallel_size=0)
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match="must divide the number of processes \\(4\\)"):
        VLLMSettings(tensor_parallel_size=3)
    with pytest.raises(UsageError, match="--vllm-\\* option: tensor_parallel_size 3 under"):
        parse_train_args(["--vllm-tensor-parallel-size", "3"])
    assert VLLMSettings(tensor_parallel_size=2).tensor_parallel_size == 2


def test_a_sleeping_engine_wakes_for_the_next_sync_or_generation(fake_vllm, policy):
    backend = VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0, sleep_mode=True))
    engine = fake_vllm[-1]
    backend.sleep()
    backend.sleep()  # once asleep, nothing more
    backend.sync_adapters(policy, 1)
    backend.sleep()
    backend.generate("agent", OBS, GenerationSettings(max_new_tokens=4))
    assert engine.events == [
        "add_lora",  # version 0, at start
        "sleep1",
        "wake_up",
        "remove_lora",  # version 0 out, version 1 in
        "add_lora",
        "sleep1",
        "wake_up",
        "generate",
    ]
    # Without sleep mode the engine is never put to sleep.
    plain = VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0))
    plain.sleep()
    assert "sleep1" not in fake_vllm[-1].events


def test_settings_refuse_a_too_short_model_length():
    with pytest.raises(ValueError, match="max_model_len must be >= 2"):
        VLLMSettings(max_model_len=1)


def test_the_bf16_probe_tolerance_sits_above_what_two_bf16_kernels_disagree_by():
    # Two correct bfloat16 computations of the same log-probs (SDPA while sampling, eager
    # attention recomputing, as an engine's kernels differ from the policy's) over probes of 2
    # prompts x 8 tokens: the old default (5e-2) would stop a correct run with AdapterSyncError.
    from marft_algos.rollout.vllm import default_probe_tolerance

    def load(attn):
        policy = MultiAgentPolicy.from_pretrained(
            "marft-tiny-math",  # the built-in trained model: peaked distributions, as real LLMs
            ["agent"],
            seed=0,
            torch_dtype=torch.bfloat16,
            model_kwargs={"attn_implementation": attn},
        )
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in policy.trainable_parameters("agent"):
                if p.shape[1] < p.shape[0]:  # lora_B, moved off zero as by training
                    p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * 0.02)
        return policy

    sampler, other = load("sdpa"), load("eager")
    gaps = []
    for i in range(10):
        obs = [[{"role": "user", "content": f"What is {7 + 13 * i} + {i}? Explain."}]] * 2
        gens = sampler.generate("agent", obs, GenerationSettings(max_new_tokens=8, seed=i))
        with torch.no_grad():
            lp = other.token_log_probs(
                "agent", [g.prompt_ids for g in gens], [g.action_ids for g in gens]
            )
        gaps.append(
            max(
                float((lp.log_probs[j, lp.mask[j]] - torch.tensor(g.log_probs)).abs().max())
                for j, g in enumerate(gens)
            )
        )
    assert max(gaps) > 5e-2, gaps
    assert max(gaps) < default_probe_tolerance(torch.bfloat16), gaps
    assert default_probe_tolerance(torch.float32) == 1e-3


def test_a_backend_built_before_its_base_is_filled_is_served_by_the_trainer(fake_vllm, tiny_path):
    # marft train --fsdp: ranks but 0 load the base empty, so the engine starts without serving
    # adapters (there are no weights to save yet); the trainer serves version 0 once it has them.
    from trainer_envs import DigitsEnv

    from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer

    empty = MultiAgentPolicy.from_pretrained(str(tiny_path), ["answerer"], seed=0, device="meta")
    backend = VLLMRolloutBackend(empty, VLLMSettings(probe_tokens=0), sync=False)
    assert backend.version == -1 and fake_vllm[-1].events == []

    policy = MultiAgentPolicy.from_pretrained(str(tiny_path), ["answerer"], seed=0)
    backend = VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0), sync=False)
    config = GRPOConfig(num_generations=2, episodes_per_iteration=2, iterations=1)
    GRPOTrainer(policy, lambda: DigitsEnv(team=1), config, rollout_backend=backend)
    assert backend.version == 0 and fake_vllm[-1].events == ["add_lora"]


def test_the_engines_prefix_cache_hits_are_counted(fake_vllm, policy):
    from marft_algos.distributed import DistributedContext
    from marft_algos.trainers.stats import token_count_metrics

    backend = VLLMRolloutBackend(policy, VLLMSettings(probe_tokens=0))
    gens = backend.generate("agent", OBS, GenerationSettings(max_new_tokens=4, seed=1))
    width = len(gens[0].prompt_ids)
    policy.prefill.take()  # what the policy itself generated (nothing here) is its own count
    metrics = token_count_metrics(
        [policy.prefill, backend.prefill], DistributedContext(), "rollout/prefill_tokens"
    )
    assert metrics == {
        "rollout/prefill_tokens": len(OBS),
        "rollout/prefill_tokens_saved": len(OBS) * (width - 1),
    }
    again = token_count_metrics([backend.prefill], DistributedContext(), "rollout/prefill_tokens")
    assert again == {}  # taken: the counts start again
