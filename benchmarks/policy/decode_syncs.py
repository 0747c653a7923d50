"""Decode time per token and host synchronisations: ready 4D masks vs. transformers' 2D mask.

:func:`~marft_algos.policy.decoding.decode` on the packaged ``marft-tiny-math`` (no adapter), 16
left-padded prompts of different lengths, every row decoding ``--max-new-tokens`` tokens (no
end of turn), sampling. The two mask paths alternate in one process, so machine load affects them
alike; each is timed ``--repeats`` times and the median reported. Synchronisations are the calls
of ``aten._local_scalar_dense`` in one decode (issue 49: with the 2D mask transformers reads it on
the host at every step).

Run (one thread)::

    OMP_NUM_THREADS=1 python benchmarks/policy/decode_syncs.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.decoding import decode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rollout_speed import PROBLEMS  # the same 16 prompts


class _ScalarReads(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.__name__.startswith("_local_scalar_dense"):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _decode(model: Any, prompts: list[list[int]], pad_id: int, n: int, ready: bool) -> Any:
    torch.manual_seed(0)
    return decode(model, prompts, max_new_tokens=n, pad_id=pad_id, eos_ids=[], ready_mask=ready)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.max_new_tokens
    policy = MultiAgentPolicy.from_pretrained("marft-tiny-math", ["agent"], seed=0)
    backbone = policy.backbone("agent")
    prompts = [policy.render("agent", [{"role": "user", "content": p}]) for p in PROBLEMS]
    times: dict[bool, list[float]] = {False: [], True: []}
    with backbone.using(None) as model:
        outputs = {ready: _decode(model, prompts, backbone.pad_id, n, ready) for ready in times}
        same = outputs[True].actions == outputs[False].actions
        syncs = {}
        for ready in times:
            for length in (16, n):
                counter = _ScalarReads()
                with counter:
                    _decode(model, prompts, backbone.pad_id, length, ready)
                syncs[ready, length] = counter.count
        for _ in range(args.repeats):
            for ready in times:
                start = time.perf_counter()
                _decode(model, prompts, backbone.pad_id, n, ready)
                times[ready].append(time.perf_counter() - start)
    print(
        f"marft-tiny-math, batch {len(prompts)}, {n} new tokens, torch "
        f"{torch.__version__}, {torch.get_num_threads()} thread(s), same tokens: {same}"
    )
    for ready, label in ((False, "2D mask (transformers)"), (True, "ready 4D masks")):
        per_token = statistics.median(times[ready]) / n * 1e3
        print(
            f"{label:24s} {per_token:7.3f} ms/token (median of {args.repeats})   syncs: "
            f"{syncs[ready, 16]} at 16 tokens, {syncs[ready, n]} at {n}"
        )
    ratio = statistics.median(times[False]) / statistics.median(times[True])
    print(f"2D-mask time / ready-mask time: {ratio:.3f}")


if __name__ == "__main__":
    main()
