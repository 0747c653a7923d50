"""The agent-programs tutorial's code blocks run, in order, as one program."""

from __future__ import annotations

import math
import re
from pathlib import Path

import marft_envs

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial_programs.md"


def test_tutorial_code_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), flags=re.DOTALL)
    assert len(blocks) == 4
    namespace: dict = {}
    try:
        for block in blocks:
            exec(compile(block, str(TUTORIAL), "exec"), namespace)
        out = capsys.readouterr().out
        assert "['planner', 'math', 'critic'] {'success': 1.0, 'cost': -0.06}" in out
        record = namespace["records"][-1]
        assert record["rollout/calls/planner"] == 1.0
        assert math.isfinite(record["train/policy_loss"])
    finally:
        marft_envs.registry.pop("tutorial/helpdesk-program-v0", None)
