"""The SFT warm-start benchmark (benchmarks/sft_warm_start) end to end at a tiny budget: both arms
train, the SFT arm's tokens include the sampled episodes, and the paired summary is written."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sft_warm_start" / "run.py"


@pytest.mark.slow  # about a minute; tests/cli/test_cli_sft.py covers marft sft -> train --init-from
def test_both_arms_train_and_the_comparison_is_paired(tmp_path):
    spec = importlib.util.spec_from_file_location("sft_warm_start_run", SCRIPT)
    assert spec is not None and spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    out = tmp_path / "results.json"
    argv = ["--seeds", "0", "--iterations", "1", "--eval-episodes", "4", "--collect", "16"]
    result = run.main([*argv, "--out-dir", str(tmp_path / "runs"), "--json", str(out)])
    assert json.loads(out.read_text())["summary"] == result["summary"]
    (seed,) = result["runs"]
    assert seed["collected"]["episodes"] == 16 and seed["collected"]["solved"] >= 1
    assert seed["sft+marft"]["generated_tokens"] > seed["collected"]["generated_tokens"]
    assert seed["paired_final"]["n"] == 4 and result["summary"]["pooled"]["n"] == 4
    assert set(seed["sft+marft"]["held_out"]) == {"0", "1"}  # after SFT, and after RL
