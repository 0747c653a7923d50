"""``memory/rollout_peak_gib`` and ``memory/update_peak_gib``: the most device memory each phase of
an iteration holds, the largest over the processes, on GPUs only (torch's CUDA memory counters
stand in for a GPU here)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from marft_algos.distributed import DistributedContext
from marft_algos.runs.metrics import METRICS
from marft_algos.trainers.stats import device_peak_gib, peak_metrics


def test_each_phase_counts_from_the_last_reading_and_the_largest_process_is_logged(monkeypatch):
    held = {"peak": 5 * 2**30}  # left from loading the model
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: held.update(peak=0))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: held["peak"])
    other = [1.0, 6.0]  # the other process's rollout and update peaks, GiB
    gpu = SimpleNamespace(
        device=torch.device("cuda", 0),
        max=lambda values: [max(a, b) for a, b in zip(values, other, strict=True)],
    )
    assert device_peak_gib(gpu) == 5.0  # the iteration starts: the count restarts
    held["peak"] = 2 * 2**30
    rollout = device_peak_gib(gpu)
    held["peak"] = 2**29
    update = device_peak_gib(gpu)
    assert (rollout, update) == (2.0, 0.5)
    assert peak_metrics(gpu, rollout=rollout, update=update) == {
        "memory/rollout_peak_gib": 2.0,
        "memory/update_peak_gib": 6.0,
    }
    assert {"memory/rollout_peak_gib", "memory/update_peak_gib"} <= set(METRICS)


def test_nothing_is_measured_on_a_cpu(monkeypatch):
    def touched(device):
        raise AssertionError("no CUDA call on a CPU")

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", touched)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", touched)
    cpu = DistributedContext()
    assert device_peak_gib(cpu) is None
    assert peak_metrics(cpu, rollout=None, update=None) == {}
