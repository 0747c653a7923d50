"""Host memory of loading a base under ``--fsdp``: rank 0 loads, the other ranks load empty.

``marft train --fsdp`` loads the base's weights on rank 0 only; every other rank builds the model
on the meta device, and sharding fills each rank's shards from rank 0
(:func:`marft_algos.trainers.sharding.shard_run`). Before, every process read the whole base into
host memory, so a node needed one copy of the base per process (8 x 141 GB for Llama-3-70B on
one 8-GPU node). This script loads a real model both ways on 2 gloo processes, shards it, and
reports each rank's peak resident memory above its baseline (after imports), the seconds to
load and shard, and a checksum of each rank's shards (the two ways must give the same weights).

The node's number is the largest drop of ``MemAvailable`` (/proc/meminfo, sampled every 10 ms)
while the two processes run: memory the kernel cannot reclaim. A rank's own peak (``ru_maxrss``)
also counts the pages of memory-mapped weight files it touched, which the page cache shares
between processes, so it overstates what a loader that maps the file costs the node. Loading in
the file's dtype lets transformers map the weights; any other dtype makes each loading process
convert them into memory of its own.

    python benchmarks/scaling/fsdp_load.py        # SmolLM2-135M (float32 file), float32 and bfloat16
    python benchmarks/scaling/fsdp_load.py --model PATH --dtypes bfloat16

Results go to ``benchmarks/scaling/fsdp_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIB = 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB  # Linux: KiB


def available_mib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / MIB
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def node_peak_mib(command: list[str], env: dict[str, str]) -> float:
    """Run ``command``; the largest drop of available memory below its start while it ran."""
    start = available_mib()
    low = [start]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            low[0] = min(low[0], available_mib())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        subprocess.run(command, env=env, check=True)
    finally:
        done.set()
        sampler.join()
    return start - low[0]


def worker(model: str, dtype: str, empty: bool, out: Path) -> None:
    import torch

    torch.set_num_threads(1)
    from marft_algos.distributed import init_distributed
    from marft_algos.policy import MultiAgentPolicy
    from marft_algos.trainers.grpo import GRPOConfig
    from marft_algos.trainers.sharding import shard_run

    dist = init_distributed("cpu")
    baseline = peak_mib()
    start = time.perf_counter()
    device = "meta" if empty and dist.rank else "cpu"
    policy = MultiAgentPolicy.from_pretrained(
        model, ["writer", "answerer"], seed=0, device=device, torch_dtype=getattr(torch, dtype)
    )
    loaded = peak_mib()
    shard_run(policy, None, dist, GRPOConfig(fsdp=True), None)
    seconds = time.perf_counter() - start
    local = [
        p.to_local() if hasattr(p, "to_local") else p
        for p in policy.backbone("writer").model.parameters()
    ]
    row = {
        "rank": dist.rank,
        "empty_load": empty and dist.rank > 0,
        "peak_above_baseline_mib": peak_mib() - baseline,
        "peak_at_load_mib": loaded - baseline,
        "load_and_shard_s": seconds,
        "checksum": float(sum(t.detach().double().sum() for t in local)),
        "stored_mib": sum(t.numel() * t.element_size() for t in local) / MIB,
    }
    rows = dist.gather(row)
    if dist.is_main:
        out.write_text(json.dumps(rows) + "\n")


def measure(model: str, dtype: str, json_path: Path) -> dict:
    """Both ways of loading ``model`` in ``dtype`` on 2 processes, one after the other."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    result: dict = {"model": model, "dtype": dtype, "processes": 2, "node_peak_mib": {}}
    for way, empty in (("every_rank_loads", False), ("rank0_loads", True)):
        part = json_path.with_suffix(f".{way}.tmp")
        command = [*launch, "2", __file__, "--worker", str(part), "--model", model]
        command += ["--dtypes", dtype] + (["--empty"] if empty else [])
        result["node_peak_mib"][way] = node_peak_mib(command, env)
        result[way] = json.loads(part.read_text())
        part.unlink()
    every, rank0 = result["every_rank_loads"], result["rank0_loads"]
    result["same_weights"] = [r["checksum"] for r in every] == [r["checksum"] for r in rank0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each way and dtype")
    parser.add_argument("--json", type=Path, default=HERE / "fsdp_load.json")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--empty", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.model, args.dtypes[0], args.empty, args.worker)
        return
    results = [
        {**measure(args.model, dtype, args.json), "repeat": k}
        for dtype in args.dtypes
        for k in range(args.repeats)
    ]
    args.json.write_text(json.dumps(results, indent=1) + "\n")
    for result in results:
        print(
            f"{result['model']} in {result['dtype']}, 2 processes, run {result['repeat'] + 1}; "
            f"peak memory above start, MiB"
        )
        print(f"{'':18} {'rank 0':>8} {'rank 1':>8} {'node':>8} {'load+shard s':>13}")
        for way in ("every_rank_loads", "rank0_loads"):
            rows = result[way]
            print(
                f"{way:18} {rows[0]['peak_above_baseline_mib']:>8.0f} "
                f"{rows[1]['peak_above_baseline_mib']:>8.0f} "
                f"{result['node_peak_mib'][way]:>8.0f} "
                f"{max(r['load_and_shard_s'] for r in rows):>13.1f}"
            )
        print(f"same shards both ways: {result['same_weights']}")


if __name__ == "__main__":
    main()
