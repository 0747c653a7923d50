"""Design probes: the untuned model's first reply under several prompts, on *training* tasks only.

    python benchmarks/tool_calls/probe.py          # writes results/probes.json

Each prompt is rendered exactly as the env renders a call with tools under ``tool_prompt="hermes"``
(:func:`~marft_envs.programs.tools.hermes_prompt`), and the first reply is measured as in
``measure.py`` (a well-formed call to an offered tool). Used to choose the recipe's prompt before
any tuned run; the held-out tasks are never probed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_task
from measure import MODEL, SEED, first_reply_is_call, greedy_settings, sampled_settings

from marft_algos.policy import MultiAgentPolicy
from marft_envs.programs.tools import hermes_prompt

HERE = Path(__file__).resolve().parent
#: The example call, as the model should write it.
CALL = '<tool_call>{"name": "get_invoice_amount", "arguments": {"invoice_id": "1234"}}</tool_call>'
IN_SYSTEM = (
    f" For example, when asked 'How much is due on invoice 1234?', reply only with the call "
    f"{CALL} and nothing else."
)
CALL_TURN = [
    {"role": "user", "content": "How much is due on invoice 1234?"},
    tool_task.EXAMPLE[1],
]


def prompts(request: str) -> dict[str, list[dict[str, Any]]]:
    """The prompt variants for one request (before the tools are written in)."""
    system = {"role": "system", "content": tool_task.SYSTEM}
    system_example = {"role": "system", "content": tool_task.SYSTEM + IN_SYSTEM}
    user = {"role": "user", "content": request}
    return {
        "plain (tool-lookup-v0)": [system, user],
        "example exchange as turns (tool-lookup-example-v0)": [
            system,
            *tool_task.EXAMPLE,
            user,
        ],
        "example call as turns, no result": [system, *CALL_TURN, user],
        "example call in the system prompt": [system_example, user],
        "example call in the system prompt and as turns": [system_example, *CALL_TURN, user],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--tasks", type=int, default=24)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    tasks = [tool_task.train_tasks(rng) for _ in range(args.tasks)]
    policy = MultiAgentPolicy.from_pretrained(args.model, [tool_task.AGENT], seed=SEED)
    out: dict[str, Any] = {}
    for name in prompts(""):
        batch = [hermes_prompt(prompts(t["request"])[name], tool_task.TOOLS) for t in tasks]
        for decoding, settings in (("greedy", greedy_settings(48)), ("T1", sampled_settings(48))):
            generator = torch.Generator().manual_seed(SEED)
            replies = [
                g.text
                for g in policy.generate(tool_task.AGENT, batch, settings, generator=generator)
            ]
            calls = sum(first_reply_is_call(r) for r in replies)
            out[f"{name} / {decoding}"] = {"calls": calls, "tasks": len(tasks), "replies": replies}
            print(
                f"{name} / {decoding}: {calls}/{len(tasks)}  e.g. {replies[0][:100]!r}", flush=True
            )
    (HERE / "results" / "probes.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
