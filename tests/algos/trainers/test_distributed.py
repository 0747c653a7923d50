"""Data-parallel training on two CPU processes (gloo on 127.0.0.1), launched by torchrun.

One launch of each kind (the workers are in distributed_worker.py): on a fixed batch of episodes,
the two-rank update of every trainer equals the one-process update of the same batch, with two
minibatches (drawn from global episode indices, so alike at any world size); a run whose
router gives rank 1 no decision of one agent finishes without hanging and keeps the ranks
identical; its checkpoint resumes on one process; an agent program over its local endpoint trains
on both ranks; an asynchronous run (max_staleness 1, a rollout worker per rank) stays in sync,
resumes exactly from a checkpoint holding both ranks' in-flight batches, and its first update
equals a one-process asynchronous run's on the same global batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from launching import assert_params_close, one_process_updates, run_ok

WORKER = Path(__file__).parent / "distributed_worker.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    root = Path(__file__).parents[3]
    one_process_updates(tmp_path_factory, out)
    run_ok(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            # The launcher binds its own free port (a port chosen here and bound later could be
            # taken in between by another job on a busy machine).
            "--standalone",
            str(WORKER),
            "ranks",
            str(out),
        ],
        root,
    )
    run_ok([sys.executable, str(WORKER), "resume", str(out)], root)
    return out


@pytest.mark.parametrize("kind", ["action", "token", "grpo", "rloo", "reinforce-pp"])
def test_two_rank_update_equals_the_one_process_update(runs, kind):
    one = torch.load(runs / f"{kind}-one.pt")
    ranks = [torch.load(runs / f"{kind}-rank{r}.pt") for r in (0, 1)]
    assert_params_close(ranks[0]["params"], ranks[1]["params"], atol=0.0)  # identical across ranks
    assert_params_close(one["params"], ranks[0]["params"], atol=1e-6)  # and equal to one process
    for key in ("train/policy_loss", "train/entropy", "train/approx_kl"):
        assert ranks[0]["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-4, abs=1e-6), (
            key
        )
    if kind in ("rloo", "reinforce-pp"):  # the KL penalty in the reward: the same on both
        assert ranks[0]["metrics"]["train/kl"] == pytest.approx(
            one["metrics"]["train/kl"], rel=1e-4, abs=1e-7
        )
        assert ranks[0]["metrics"]["train/advantage_abs_mean"] == pytest.approx(
            one["metrics"]["train/advantage_abs_mean"], rel=1e-4
        )
    elif kind != "grpo":
        assert ranks[0]["metrics"]["train/value_loss"] == pytest.approx(
            one["metrics"]["train/value_loss"], rel=1e-4
        )


@pytest.mark.parametrize("kind", ["action", "grpo"])
def test_a_rank_without_an_agent_neither_hangs_nor_diverges(runs, kind):
    ranks = [torch.load(runs / f"run-{kind}-rank{r}.pt") for r in (0, 1)]
    assert_params_close(ranks[0]["params"], ranks[1]["params"], atol=0.0)
    # Every record is global: both ranks log the same metrics (only rank 0 writes them).
    for a, b in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert a.get("rollout/episodes") == b.get("rollout/episodes")
        assert a.get("train/policy_loss") == b.get("train/policy_loss")
    assert ranks[0]["records"][-1]["rollout/episodes"] == 8
    lines = (runs / f"run-{kind}" / "metrics.jsonl").read_text().splitlines()
    # One line per iteration, written once (the action run was resumed for a third iteration).
    assert [json.loads(line)["iteration"] for line in lines] == (
        [1, 2, 3] if kind == "action" else [1, 2]
    )


def test_a_two_rank_checkpoint_resumes_on_one_process(runs):
    resumed = torch.load(runs / "resumed.pt")
    rank0 = torch.load(runs / "run-action-rank0.pt")
    assert_params_close(rank0["params"], resumed["loaded"], atol=0.0)
    assert resumed["iteration"] == 3 and [r["iteration"] for r in resumed["records"]] == [3]


def test_an_agent_program_over_http_trains_on_two_ranks(runs):
    ranks = [torch.load(runs / f"program-rank{r}.pt") for r in (0, 1)]
    assert_params_close(ranks[0]["params"], ranks[1]["params"], atol=0.0)
    (record,) = ranks[0]["records"]
    assert record["rollout/program_errors"] == 0
    assert record["rollout/episodes"] == ranks[1]["records"][0]["rollout/episodes"] == 8
    assert abs(record["train/approx_kl"]) < 1e-3


def _without_times(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


@pytest.mark.parametrize("kind", ["action", "grpo"])
def test_an_async_run_on_two_ranks_stays_in_sync_and_resumes_exactly(runs, kind):
    """max_staleness 1 under torchrun: each rank's own worker samples its share; the update is
    the synchronous one (summed gradients), the staleness metrics are global."""
    ranks = [torch.load(runs / f"async-{kind}-rank{r}.pt") for r in (0, 1)]
    assert_params_close(
        ranks[0]["params"], ranks[1]["params"], atol=0.0
    )  # check_in_sync ran each iteration
    records = ranks[0]["records"]
    assert [r["rollout/staleness"] for r in records] == [0.0, 1.0, 1.0]
    assert [r["rollout/staleness_max"] for r in records] == [0, 1, 1]
    assert all(r["rollout/episodes"] == 8 and r["rollout/dropped_stale"] == 0 for r in records)
    assert _without_times(records) == _without_times(ranks[1]["records"])
    # Checkpoint 2 holds both ranks' in-flight batches; resumed on two ranks, the last
    # iteration repeats the uninterrupted one exactly.
    state = json.loads((runs / f"async-{kind}" / "checkpoint-2" / "state.json").read_text())
    assert state["in_flight"]["version"] == 1 and state["in_flight"]["shares"] == [4, 4]
    for rank in ranks:
        assert _without_times(rank["resumed_records"]) == _without_times(records[2:])
        assert_params_close(rank["resumed_params"], rank["params"], atol=0.0)


@pytest.mark.parametrize("kind", ["action", "grpo"])
def test_an_async_two_rank_update_equals_the_one_process_update(runs, kind):
    one = torch.load(runs / f"async-{kind}-one.pt")
    rank0 = torch.load(runs / f"async-{kind}-rank0.pt")
    assert_params_close(one["params"], rank0["first_params"], atol=1e-6)
    for key in ("train/policy_loss", "train/entropy", "train/approx_kl"):
        assert rank0["first_metrics"][key] == pytest.approx(one["record"][key], abs=1e-5), key
    assert one["record"]["rollout/episodes"] == 8
