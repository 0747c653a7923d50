"""The ``prefix_sharing`` step of ``suite.py``: one support-desk-v1 iteration per trainer on the
path before and after prompt-beginning sharing (``benchmarks/program_team/prefix_sharing.py``).

On a GPU it runs on the SmolLM2 stand-in (SmolLM2's shape and tokenizer, random weights: the
kit carries no trained weights, so most episodes end at the router's unparsable hand-off and the
iteration times the router's calls and the update of what was sampled). The dry run uses the
built-in model on the CPU with 4 episodes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def step_prefix_sharing(ctx: Any, stand_in: Any) -> dict[str, Any]:
    """Seconds per iteration before and after sharing, and the speed-up, per trainer."""
    path = ROOT / "benchmarks" / "program_team" / "prefix_sharing.py"
    spec = importlib.util.spec_from_file_location("prefix_sharing", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    raw = ctx.out / f"{ctx.args.run_step}.raw.json"
    if ctx.dry_run:
        model = {"path": "marft-tiny-math", "weights": "built-in"}
        argv = ["--model", "marft-tiny-math", "--phases", "desk_grpo", "--episodes", "4"]
    else:
        model = stand_in(ctx, "smollm2")
        argv = ["--model", model["path"], "--phases", "desk_grpo", "desk_marft"]
    argv += ["--device", ctx.device, "--json", str(raw)]
    result = bench.main(argv)
    summary = result["summary"]
    out = {"model": model, "argv": argv, "raw_results": raw.name, "summary": summary}
    out["headline"] = "; ".join(
        f"{phase}: {s['today']:.1f} s -> {s['shared']:.1f} s ({s['speedup']:.2f}x)"
        for phase, s in summary.items()
    )
    return out
