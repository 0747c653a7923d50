"""``marft eval`` takes its device and weight dtype from the run, and the Python API loads bfloat16
on a GPU (issue 40)."""

from __future__ import annotations

import pytest
import torch
from budgets import TINY

from marft_algos.cli.evaluate import evaluate_checkpoint, find_checkpoint, run_device_and_dtype
from marft_algos.cli.main import main

ONE_ITERATION = ["--iterations", "1", *TINY, "--eval-every", "1", "--no-plot", "--progress", "off"]


def test_eval_of_a_bfloat16_run_loads_bfloat16_weights(tiny_path, tmp_path, monkeypatch):
    from marft_algos.runs import checkpoint as checkpoint_module

    run = tmp_path / "r"
    main(
        [
            "train",
            "--model",
            tiny_path,
            "--output-dir",
            str(run),
            "--dtype",
            "bfloat16",
            *ONE_ITERATION,
        ]
    )
    loaded = []
    real = checkpoint_module.policy_from_checkpoint

    def recording(path, **kwargs):
        policy = real(path, **kwargs)
        loaded.append((kwargs.get("device"), policy.backbone(policy.agents[0]).model.dtype))
        return policy

    monkeypatch.setattr(checkpoint_module, "policy_from_checkpoint", recording)
    evaluate_checkpoint(find_checkpoint(run))
    assert loaded == [("cpu", torch.bfloat16)]


def test_eval_device_follows_the_run_where_this_machine_allows(monkeypatch):
    gpu_run = {"device": "cuda:3", "dtype": "bfloat16"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert run_device_and_dtype(gpu_run, None, None) == ("cuda", "bfloat16")
    assert run_device_and_dtype(gpu_run, "cpu", "float32") == ("cpu", "float32")
    assert run_device_and_dtype({"device": "cpu", "dtype": "float32"}, None, None) == (
        "cpu",
        "float32",
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_device_and_dtype(gpu_run, None, None) == ("cpu", "bfloat16")
    # Runs that recorded neither evaluate as they trained before both were recorded.
    assert run_device_and_dtype({}, None, None) == ("cpu", "float32")


def test_eval_flags_dtype_and_device_parse():
    from marft_algos.cli.evaluate import EvalArguments

    assert EvalArguments().device is None and EvalArguments().dtype is None
    with pytest.raises(ValueError, match=r"--device 'tpu9'"):
        EvalArguments(device="tpu9")


class _Loaded(Exception):
    pass


@pytest.mark.parametrize(("device", "dtype"), [("cuda", torch.bfloat16), ("cpu", torch.float32)])
def test_the_python_api_loads_bfloat16_on_a_gpu(tiny_path, monkeypatch, device, dtype):
    from transformers import AutoModelForCausalLM

    from marft_algos.policy import MultiAgentPolicy

    seen = []

    def recording(path, **kwargs):
        seen.append(kwargs.get("dtype"))
        raise _Loaded  # stop before anything would move to a GPU this machine lacks

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", recording)
    with pytest.raises(_Loaded):
        MultiAgentPolicy.from_pretrained(tiny_path, ["actor"], device=device)
    assert seen == [dtype]


def test_train_loads_the_attention_kernel_asked_for(tiny_path, tmp_path, monkeypatch):
    from marft_algos.policy import multi_agent

    seen = []
    real = multi_agent.load_backbone

    def recording(name, **kwargs):
        backbone = real(name, **kwargs)
        seen.append(backbone.model.config._attn_implementation)
        return backbone

    monkeypatch.setattr(multi_agent, "load_backbone", recording)
    run = tmp_path / "r"
    flags = ["--model", tiny_path, "--attn-implementation", "eager", *ONE_ITERATION]
    main(["train", "--output-dir", str(run), *flags])
    assert seen == ["eager"]
    config = (run / "config.json").read_text()
    assert '"attn_implementation": "eager"' in config
    evaluate_checkpoint(find_checkpoint(run))  # marft eval loads the run's kernel too
    assert seen == ["eager", "eager"]


def test_train_switches_gradient_checkpointing_on(tiny_path, tmp_path, monkeypatch):
    from marft_algos.policy import MultiAgentPolicy

    seen = []
    real = MultiAgentPolicy.token_log_probs_with_uncut

    def recording(self, *args, **kwargs):
        seen.append(self.gradient_checkpointing)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MultiAgentPolicy, "token_log_probs_with_uncut", recording)
    flags = ["--model", tiny_path, "--gradient-checkpointing", *ONE_ITERATION]
    main(["train", "--output-dir", str(tmp_path / "r"), *flags])
    assert seen and all(seen)


def test_a_function_the_run_recorded_as_an_env_argument_is_imported_again():
    # register_program's program (and any callable env argument) is recorded as module:qualname.
    import json

    from marft_algos.cli.evaluate import _recorded_env_kwargs
    from marft_algos.cli.parsing import UsageError

    run = {"env": {"kwargs": {"program": {"callable": "json:dumps"}, "max_calls": 4}}}
    assert _recorded_env_kwargs(run, False) == {"program": json.dumps, "max_calls": 4}
    gone = {"env": {"kwargs": {"program": {"callable": "no_such_module_here:desk"}}}}
    with pytest.raises(UsageError, match="'program' as the function no_such_module_here:desk"):
        _recorded_env_kwargs(gone, False)


def test_a_registered_program_env_is_rebuilt_from_its_run_record():
    # register_program's program and task generator are the spec's own: the registry supplies them.
    import marft_envs
    from marft_algos.cli.evaluate import _recorded_env_kwargs

    def desk(task, client):
        return 0.0

    def draw(rng):
        return {"q": str(int(rng.integers(10)))}

    marft_envs.register_program(
        "eval-rebuild-test-v0", desk, agents=["solo"], tasks=draw, test_tasks=draw
    )
    try:
        run = {"env": marft_envs.registry["eval-rebuild-test-v0"].to_json()}
        kwargs = _recorded_env_kwargs(run, False, "eval-rebuild-test-v0")
        assert "program" not in kwargs and "tasks" not in kwargs
        assert marft_envs.make("eval-rebuild-test-v0", **kwargs).possible_agents == ["solo"]
    finally:
        marft_envs.registry.pop("eval-rebuild-test-v0", None)
