"""Every job of support-desk-v2's step 4 at once on one GPU: step 6 of the v2 plan.

One ``run_v2.py --device cuda --jobs SETTING:SEED`` process a job, all started together (at
most ``--max-parallel`` at a time), each under ``--limit-s`` and all under ``--deadline-s``. Every
child runs in its own process group and dies with this launcher (``PR_SET_PDEATHSIG``); a
timeout, Ctrl-C, SIGTERM or an exception kills every group still running. ``<out>/gpu_v2.json``
is rewritten as jobs start and end: per job its status (``finished``, ``failed`` with its stderr's
tail, ``timed out``, ``killed``, ``not started``), the reason when it did not finish (for
``summary.json``'s ``not_run``), wall seconds, peak memory (from the job's JSON) and the device.
Each job's stdout and stderr are ``<out>/logs/<setting>-seed<k>.out`` and ``.err``.

The model is SmolLM2-135M-Instruct's GGUF (93.8 MiB, above the 64 MiB a device call carries):
``--pack-model DIR`` writes it here as parts with their SHA-256s and the wheels the GPU image
lacks (``benchmarks/gpu/carry.py``); there, the launcher joins the parts, checks the hash,
installs the wheels, converts the GGUF once and gives every job the converted folder. The
README's "step 6, the GPU runner" gives the device calls that carry the parts.

    python benchmarks/program_team/gpu_v2.py --pack-model benchmarks/gpu/smollm2_parts  # here
    python benchmarks/program_team/gpu_v2.py --prepare-only       # there: join, check, convert
    python benchmarks/program_team/gpu_v2.py --attribution marft --bundle $OUT/v2.tar.gz  # 16 jobs
    python benchmarks/program_team/gpu_v2.py --dry-run --jobs marft:0 grpo:0 --out /tmp/gpu_v2_dry
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
sys.path.insert(1, str(ROOT))
import carry  # noqa: E402
from parallel import TAIL_CHARS, Job, launch  # noqa: E402
from suite import child_env  # noqa: E402

RUN_V2 = HERE / "run_v2.py"
PARTS = ROOT / "benchmarks" / "gpu" / "smollm2_parts"
#: run_v2.py's protocol jobs (README, step 3): ``untuned`` once, five tuned settings x 3 seeds.
TUNED = ("marft", "grpo", "grpo-plain", "independent", "single")
PROTOCOL_JOBS = ["untuned:0"] + [f"{s}:{k}" for s in TUNED for k in (0, 1, 2)]
DRY_RUN_JOBS = ["marft:0", "grpo:0"]
#: Packages the GPU image lacks that the jobs import (module names = wheel names here).
WHEELS = ["gguf", "gymnasium", "pettingzoo", "farama-notifications", "cloudpickle"]


def prepare_model(
    model: str | None, parts: Path, dry_run: bool
) -> tuple[str | None, dict[str, str]]:
    """The model to pass the jobs (None: run_v2's default) and the environment they run in: the
    given ``model``, else the packed one in ``parts``, joined, checked and converted once into
    ``parts/cache`` (an ignored folder, so it stays on the device machine between calls)."""
    env = child_env()
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    if model or (dry_run and not (parts / carry.MANIFEST).is_file()):
        return model, env  # None: run_v2's smollm2-135m-instruct, installed here
    gguf = carry.join_parts(parts)  # raises MissingPart with what to carry
    modules = [w.replace("-", "_") for w in WHEELS]
    site = carry.install_wheels(parts / "wheels", parts / "site", modules)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    code = (
        "import sys; from marft_algos.policy.gguf import convert_gguf as c; print(c(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(gguf)],
        env={"MARFT_CACHE_DIR": str(parts / "cache"), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"converting {gguf} failed:\n{done.stderr[-TAIL_CHARS:]}")
    folder = Path(done.stdout.strip().splitlines()[-1]).resolve()
    # Inside the repository (the jobs' folder), relative: no machine's folders in the results.
    return str(folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder), env


def device_name(dry_run: bool) -> str:
    """The GPU's name (nvidia-smi), or ``cpu`` in a dry run."""
    if dry_run:
        return "cpu"
    try:
        query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"cuda (nvidia-smi: {err})"


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", nargs="+", help="setting:seed (default: the protocol's 16)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "v2")
    parser.add_argument("--model", default=None, help="model for every job (default: the parts)")
    parser.add_argument("--model-dir", type=Path, default=PARTS, help="the packed model's parts")
    parser.add_argument("--max-parallel", type=int, default=0, help="0: every job at once")
    parser.add_argument(
        "--limit-s", type=float, default=None, help="each job's limit (default 540 s; dry: 1200)"
    )
    parser.add_argument(
        "--deadline-s", type=float, default=None, help="all jobs' deadline (560 s; dry: 1200)"
    )
    parser.add_argument(
        "--attribution",
        nargs="*",
        default=[],
        metavar="SETTING_OR_JOB",
        help="jobs given run_v2.py --attribution: settings (marft) or jobs (grpo:0)",
    )
    parser.add_argument("--dry-run", action="store_true", help="run_v2.py --dry-run, on the CPU")
    parser.add_argument("--bundle", type=Path, help="write the results as this .tar.gz too")
    parser.add_argument(
        "--prepare-only", action="store_true", help="join, check and convert the model; exit"
    )
    parser.add_argument("--pack-model", type=Path, metavar="DIR", help="write the parts and exit")
    parser.add_argument("--part-mib", type=float, default=carry.PART_MIB)
    parser.add_argument("--runner", type=Path, default=RUN_V2, help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args(argv)  # the rest goes to every run_v2.py
    if args.dry_run and args.attribution:
        parser.error("--attribution evaluates on held-out tasks; a --dry-run never draws one")
    args.jobs = args.jobs or (DRY_RUN_JOBS if args.dry_run else PROTOCOL_JOBS)
    # The jobs run in the repository's root: paths given relative to here, made absolute.
    args.out, args.model_dir, args.runner = (
        p.resolve() for p in (args.out, args.model_dir, args.runner)
    )
    if args.model and Path(args.model).exists():
        args.model = str(Path(args.model).resolve())
    # A GPU command runs at most 10 minutes; a dry run's jobs take 4-7 minutes on a busy CPU.
    args.limit_s = args.limit_s or (1200.0 if args.dry_run else 540.0)
    args.deadline_s = args.deadline_s or (1200.0 if args.dry_run else 560.0)
    if len(set(args.jobs)) != len(args.jobs):
        parser.error(f"--jobs {args.jobs}: a job twice would write one file from two processes")
    if args.max_parallel < 0:
        parser.error(f"--max-parallel {args.max_parallel}: give a count, or 0 for every job")
    return args, extra


def bundle(out: Path, path: Path) -> None:
    """``out``'s results as one ``.tar.gz`` (the device returns at most 8 files): the JSONs,
    logs, metrics, outcomes and transcripts, without checkpoints or weights (about 120 MB a job)."""
    keep = (".json", ".jsonl", ".gz", ".out", ".err")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for file in sorted(out.rglob("*")):
            parts = file.relative_to(out).parts
            weights = any(p.startswith("checkpoint-") for p in parts) or not file.name.endswith(
                keep
            )
            if file.is_file() and not weights and file.resolve() != path.resolve():
                tar.add(file, arcname=str(Path(out.name, *parts)))


def pack_model(folder: Path, part_mib: float) -> dict[str, Any]:
    """SmolLM2's GGUF as parts, its manifest and the wheels, in ``folder``."""
    from marft_algos.policy.gguf import smollm2_gguf_path

    manifest = carry.split_file(smollm2_gguf_path(), folder, part_mib)
    manifest["wheels"] = [w.name for w in carry.download_wheels(folder / "wheels", WHEELS)]
    return manifest


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, extra = parse_args(argv)
    if args.pack_model:
        manifest = pack_model(args.pack_model, args.part_mib)
        print(json.dumps(manifest, indent=1))
        return manifest
    start = time.monotonic()
    try:
        model, env = prepare_model(args.model, args.model_dir, args.dry_run)
    except carry.MissingPart as err:
        raise SystemExit(f"gpu_v2.py: {err}") from err
    if args.prepare_only:
        print(json.dumps({"model": model, "seconds": round(time.monotonic() - start, 1)}))
        return {"model": model}
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.dry_run else "cuda"
    jobs = []
    for name in args.jobs:
        command = [sys.executable, str(args.runner), "--jobs", name, "--device", device]
        command += ["--out", str(args.out), *(["--model", model] if model else [])]
        command += ["--dry-run"] if args.dry_run else []
        if name in args.attribution or name.partition(":")[0] in args.attribution:
            command += ["--attribution"]
        setting, _, seed = name.partition(":")
        jobs.append(Job(name, command + extra, f"{setting}-seed{seed}"))
    result: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(args.dry_run),
        "dry_run": args.dry_run,
        "model": model or "run_v2.py's default",
        "max_parallel": args.max_parallel or len(jobs),
        "limit_s": args.limit_s,
        "deadline_s": args.deadline_s,
        "prepare_s": round(time.monotonic() - start, 1),
        "jobs": {},
    }

    def report(records: dict[str, dict[str, Any]]) -> None:
        result["jobs"] = {j.name: {**records[j.name], "command": j.command} for j in jobs}
        result["total_s"] = round(time.monotonic() - start, 1)
        tmp = args.out / "gpu_v2.json.tmp"
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(args.out / "gpu_v2.json")

    deadline = args.deadline_s - (time.monotonic() - start)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # launch's kills run
    try:
        launch(jobs, args.out, env, result["max_parallel"], args.limit_s, deadline, report, ROOT)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if args.bundle:
            bundle(args.out, args.bundle)
    counts: dict[str, int] = {}
    for record in result["jobs"].values():
        counts[record["status"]] = counts.get(record["status"], 0) + 1
    print(json.dumps({"out": str(args.out / "gpu_v2.json"), **counts}), flush=True)
    return result


if __name__ == "__main__":
    main()
