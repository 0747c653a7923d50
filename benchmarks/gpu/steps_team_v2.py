"""The ``team_v2`` step of ``suite.py``: support-desk-v2 step 4's 16 jobs at once on one GPU
(``benchmarks/program_team/gpu_v2.py``), ``--attribution`` for the three ``marft`` jobs and seed 0
of every other tuned setting (the protocol's attribution tables).

The model is the packed SmolLM2-135M-Instruct GGUF (``gpu_v2.py --pack-model``, carried in parts:
README, step 6); without its parts the step is skipped with the reason. The jobs write under the
scratch folder (each job's checkpoint is about 120 MB); the step's results are
``team_v2.tar.gz`` in ``--out`` (JSONs, logs, metrics, outcomes, transcripts; no weights) and, in
its record, each job's status, seconds and peak memory. The dry run: ``marft:0`` and ``grpo:0``
with ``run_v2.py --dry-run`` on the CPU (training tickets only).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import carry
from steps import Skip

ROOT = Path(__file__).resolve().parents[1].parent
GPU_V2 = ROOT / "benchmarks" / "program_team" / "gpu_v2.py"
#: Time the step keeps for itself after the jobs' deadline (the bundle, the record).
MARGIN_S = 20.0


def load_gpu_v2() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_v2", GPU_V2)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_team_v2(ctx: Any) -> dict[str, Any]:
    """Each job's status, seconds and peak memory; finished count and the largest peak."""
    gpu_v2 = load_gpu_v2()
    if ctx.dry_run:
        argv = ["--dry-run", "--jobs", *gpu_v2.DRY_RUN_JOBS]
    else:
        try:
            carry.join_parts(gpu_v2.PARTS)
        except carry.MissingPart as err:
            raise Skip(f"no SmolLM2 model: {err}") from err
        # The protocol's attribution tables: every marft seed, one seed of every other setting
        # (the adapters cannot come back from the machine, so it runs inside the jobs).
        argv = ["--attribution", "marft", "grpo:0", "grpo-plain:0", "independent:0", "single:0"]
    deadline = round(max(ctx.limit_s - MARGIN_S, 60.0), 1)
    argv += ["--out", str(ctx.scratch / "team_v2"), "--bundle", str(ctx.out / "team_v2.tar.gz")]
    argv += ["--deadline-s", str(deadline), "--limit-s", str(deadline)]
    result = gpu_v2.main(argv)
    jobs = result["jobs"]
    peaks = [r["peak_memory_gb"] for r in jobs.values() if r.get("peak_memory_gb") is not None]
    statuses = [r["status"] for r in jobs.values()]
    counts = {s: statuses.count(s) for s in dict.fromkeys(statuses)}
    result["headline"] = (
        f"{len(jobs)} jobs on {result['device']}: "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + (f"; peak memory max {max(peaks):.2f} GB, sum {sum(peaks):.1f} GB" if peaks else "")
        + f"; {result.get('total_s')} s"
    )
    return result
