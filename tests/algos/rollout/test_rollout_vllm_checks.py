"""What the vLLM rollout backend checks before an engine starts, in the main environment (without
vLLM): a team on two base models is refused, and a missing vLLM is one line with the install
command. The engine itself is tested in ``tests/rollout_vllm`` (the vLLM environment)."""

from __future__ import annotations

import importlib.util

import pytest

from marft_algos.cli.main import run
from marft_algos.policy import AgentSpec, MultiAgentPolicy
from marft_algos.rollout.vllm import VLLMRolloutBackend, VLLMSettings


def test_a_team_on_two_base_models_is_refused(tiny_path, tiny_path_b):
    policy = MultiAgentPolicy.from_pretrained(
        str(tiny_path), ["reasoner", "actor"], specs={"actor": AgentSpec(model=str(tiny_path_b))}
    )
    with pytest.raises(ValueError, match="one base model") as err:
        VLLMRolloutBackend(policy)
    assert "'actor'" in str(err.value) and "'reasoner'" in str(err.value)
    assert "--rollout-backend transformers" in str(err.value)


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this environment"
)
def test_without_vllm_the_backend_flag_is_one_line_with_the_install_command(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        run(["train", "--rollout-backend", "vllm", "--output-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[0]
    assert error.startswith("marft train: error: The vLLM rollout backend needs vLLM")
    assert 'pip install -e ".[vllm]"' in error and "constraints-vllm.txt" in error
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [
        ("--vllm-gpu-memory-utilization", "1.5", "gpu_memory_utilization"),
        ("--vllm-kv-cache-gb", "0", "kv_cache_gb"),
        ("--vllm-max-loras", "0", "max_loras"),
    ],
)
def test_bad_engine_settings_are_refused_naming_them(flag, value, named, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        run(["train", flag, value, "--output-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err


def test_settings_reject_a_negative_probe():
    with pytest.raises(ValueError, match="probe_tokens"):
        VLLMSettings(probe_tokens=-1)
