"""The debate tutorial's code blocks run, in order, as one program, and print the schedule the
page shows."""

from __future__ import annotations

import re
from pathlib import Path

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial_debate.md"


def test_debate_tutorial_runs_and_prints_the_documented_schedule(capsys):
    text = TUTORIAL.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) >= 4
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(TUTORIAL), "exec"), namespace)
    printed = capsys.readouterr().out
    shown = re.search(r"```text\n(round 1.*?)```", text, flags=re.DOTALL)
    assert shown is not None
    assert shown.group(1) in printed
    assert printed.startswith("rebut solver_b\n")
