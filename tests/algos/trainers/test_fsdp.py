"""Sharded training (``fsdp=True``, torch's FSDP2) on two CPU processes (gloo on 127.0.0.1).

On the fixed batches of test_distributed.py's one-process updates (distributed_worker.py), every
trainer's two-rank sharded update equals the one-process update; each rank stores half the base
model's decoder layers; hybrid sharding and bf16 compute run; a run whose router gives rank 1 no writer decision
(so rank 1 runs stand-in passes) keeps the ranks identical, and its checkpoint resumes on one
process. The workers are in fsdp_worker.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from launching import assert_params_close, one_process_updates, run_ok

HERE = Path(__file__).parent
KINDS = ["action", "token", "grpo", "rloo", "reinforce-pp"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    root = Path(__file__).parents[3]
    one_process_updates(tmp_path_factory, out)
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    run_ok([*launch, "--standalone", str(HERE / "fsdp_worker.py"), "ranks", str(out)], root)
    run_ok([sys.executable, str(HERE / "fsdp_worker.py"), "resume", str(out)], root)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_a_sharded_two_rank_update_equals_the_one_process_update(runs, kind):
    one = torch.load(runs / f"{kind}-one.pt")
    ranks = [torch.load(runs / f"fsdp-{kind}-rank{r}.pt") for r in (0, 1)]
    assert_params_close(ranks[0]["params"], ranks[1]["params"], atol=0.0)  # identical across ranks
    assert_params_close(one["params"], ranks[0]["params"], atol=1e-6)  # and equal to one process
    # The policy losses agree to 1e-6 (measured: up to 6e-7, sums taken in another order), the
    # entropy (about 10) to 1e-4 relative.
    assert (
        abs(ranks[0]["metrics"]["train/policy_loss"] - one["metrics"]["train/policy_loss"]) < 1e-6
    )
    for key in ("train/entropy", "train/approx_kl"):
        assert ranks[0]["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-4, abs=1e-6)
    if kind in ("action", "token"):
        assert ranks[0]["metrics"]["train/value_loss"] == pytest.approx(
            one["metrics"]["train/value_loss"], rel=1e-5
        )
    if kind in ("rloo", "reinforce-pp"):  # the reference model's forward passes, sharded
        assert ranks[0]["metrics"]["train/kl"] == pytest.approx(
            one["metrics"]["train/kl"], rel=1e-4, abs=1e-7
        )


@pytest.mark.parametrize("kind", KINDS)
def test_each_rank_stores_half_the_decoder_layers(runs, kind):
    # docs/scaling.md's formula: layers / N, plus the embeddings and final norm whole. Rank 1
    # loaded the base empty (meta device) and received rank 0's weights: the update equality above
    # checks their values; here its tied output layer is still its input embedding.
    for r in (0, 1):
        saved = torch.load(runs / f"fsdp-{kind}-rank{r}.pt")
        mine, whole, layers = saved["bytes"]
        assert layers > whole / 2
        assert mine == layers / 2 + (whole - layers)
        assert saved["tied"]


@pytest.mark.parametrize("name", ["shared", "frozen", "frozen-trained", "critic-base", "ppo"])
def test_every_agent_layout_and_single_agent_ppo_train_sharded_as_in_one_process(runs, name):
    # One adapter shared by both agents (GRPO); a frozen writer on the plain base or with a saved
    # adapter (which rank 1, loading empty, receives from rank 0), and a critic on its own base
    # (action-level MARFT); single-agent PPO: the two-rank sharded update equals the one-process
    # update.
    ranks = [torch.load(runs / f"layout-{name}-rank{r}.pt") for r in (0, 1)]
    assert_params_close(ranks[0]["params"], ranks[1]["params"], atol=0.0)
    assert_params_close(ranks[0]["one_params"], ranks[1]["one_params"], atol=0.0)  # one batch
    assert_params_close(ranks[0]["one_params"], ranks[0]["params"], atol=1e-6)
    # Frozen adapters too are rank 0's on the rank that loaded empty (they never train, so the
    # update could not tell).
    assert_params_close(ranks[0]["adapters"], ranks[1]["adapters"], atol=0.0)
    alone = {"frozen", "frozen-trained", "ppo"}  # the answerer trains alone
    agents = {"answerer"} if name in alone else {"writer", "answerer"}
    assert set(ranks[0]["params"]) - {"critic"} == agents
    if name == "frozen-trained":
        # The saved weights, not LoRA's start (B = 0).
        assert all(p.abs().sum() > 0 for p in ranks[1]["adapters"]["writer"])
    one, sharded = ranks[0]["one"], ranks[0]["metrics"]
    for key in ("train/policy_loss", "train/entropy"):
        assert sharded[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("kind", ["action", "grpo"])
def test_decisions_without_tokens_train_sharded_as_in_one_process(runs, kind):
    # Rank 1's writer decisions hold no tokens: its writer chunk still runs its forward and
    # backward passes (over a stand-in token), so the ranks neither hang nor diverge, and the
    # update equals one process's on the same batch (before, such a chunk ran no forward and its
    # loss had no graph: a crash in one process, a hang when sharded).
    ranks = [torch.load(runs / f"tokenless-{kind}-rank{r}.pt") for r in (0, 1)]
    assert_params_close(ranks[0]["params"], ranks[1]["params"], atol=0.0)
    assert_params_close(ranks[0]["one_params"], ranks[0]["params"], atol=1e-6)
    one, sharded = ranks[0]["one"], ranks[0]["metrics"]
    assert abs(sharded["train/policy_loss"] - one["train/policy_loss"]) < 1e-6


def test_hybrid_sharding_and_bf16_compute(runs):
    one = torch.load(runs / "grpo-one.pt")
    hsdp = [torch.load(runs / f"fsdp-hsdp-rank{r}.pt") for r in (0, 1)]
    # Two replica groups of one shard each: every rank holds the whole base, the update is exact.
    assert hsdp[0]["bytes"][0] == hsdp[0]["bytes"][1]
    assert_params_close(one["params"], hsdp[0]["params"], atol=1e-6)
    bf16 = [torch.load(runs / f"fsdp-bf16-rank{r}.pt") for r in (0, 1)]
    assert_params_close(bf16[0]["params"], bf16[1]["params"], atol=0.0)
    assert bf16[0]["metrics"]["train/entropy"] == pytest.approx(
        one["metrics"]["train/entropy"], rel=1e-2
    )
    assert bf16[0]["metrics"]["train/entropy"] != one["metrics"]["train/entropy"]  # bf16 ran


def test_a_rank_without_an_agent_neither_hangs_nor_diverges_and_resumes_exactly(runs):
    ranks = [torch.load(runs / f"run-fsdp-rank{r}.pt") for r in (0, 1)]
    assert_params_close(ranks[0]["params"], ranks[1]["params"], atol=0.0)
    assert [r["rollout/episodes"] for r in ranks[0]["records"]] == [8, 8]
    for a, b in zip(ranks[0]["records"], ranks[1]["records"], strict=True):
        assert a["train/policy_loss"] == b["train/policy_loss"]
    # Resumed from checkpoint-1 on two sharded ranks, the second iteration repeats exactly.
    assert_params_close(ranks[0]["params"], ranks[0]["resumed_params"], atol=0.0)
    timeless = [
        {k: v for k, v in r.items() if not k.startswith("time/")} for r in ranks[0]["records"]
    ]
    again = [
        {k: v for k, v in r.items() if not k.startswith("time/")}
        for r in ranks[0]["resumed_records"]
    ]
    assert again == timeless[1:]
    resumed = torch.load(runs / "run-fsdp-resumed.pt")
    assert_params_close(
        ranks[0]["params"], resumed["loaded"], atol=0.0
    )  # the sharded run's adapters
    assert [r["iteration"] for r in resumed["records"]] == [3]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


# -m slow (the suite's time): sharded resume is tested in process above (the same checkpoints),
# and kill -9 and resume through the command line in tests/cli/test_cli_runs.py.
@pytest.mark.slow
def test_the_command_line_trains_sharded_under_torchrun_survives_a_kill_and_evaluates_on_one_process(
    tmp_path,
):
    # The launch line: torchrun --no-python marft train --fsdp, on the built-in team; killed (every
    # process, SIGKILL) once its first checkpoint is written, resumed sharded, then evaluated by
    # one plain process.
    out = tmp_path / "run"
    marft = str(Path(sys.executable).parent / "marft")
    budget = ["--max-new-tokens", "6", "--episodes-per-iteration", "4", "--eval-episodes", "4"]
    budget += ["--rollout-threads", "4", "--no-plot", "--iterations", "2", "--eval-every", "0"]
    budget += ["--checkpoint-every", "1", "--output-dir", str(out)]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    train = [*launch, "--standalone", "--no-python", marft, "train", "--fsdp", *budget]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "COLUMNS": "200"}
    run = subprocess.Popen(train, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and run.poll() is None:
        if (out / "checkpoint-1" / "manifest.json").exists():
            break
        time.sleep(0.05)
    assert run.poll() is None, run.communicate()[1][-4000:]  # killed mid-run, not after it
    # As a lost node: the workers (torchrun starts each in a session of its own) and the launcher.
    for pid in [*children(run.pid), run.pid]:
        os.kill(pid, signal.SIGKILL)
    run.communicate()
    assert not (out / "checkpoint-2").exists()

    done = subprocess.run(
        [*train, "--resume"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "2 processes (base sharded: --fsdp)" in done.stdout
    assert "resumed at iteration" in done.stdout
    iterations = [json.loads(line)["iteration"] for line in (out / "metrics.jsonl").open()]
    assert iterations[-1] == 2 and sorted(set(iterations)) == [0, 1, 2]
    evaluated = subprocess.run(
        [marft, "eval", str(out), "--episodes", "4"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-4000:]
    assert "accuracy before (untuned)" in evaluated.stdout


def test_sharding_is_refused_where_it_cannot_run():
    from distributed_worker import build

    from marft_algos.distributed import DistributedContext
    from marft_algos.trainers.grpo import GRPOConfig

    with pytest.raises(ValueError, match="torchrun --nproc_per_node N"):
        build("grpo", DistributedContext(), fsdp=True)
    two = DistributedContext(rank=0, world_size=2)  # no collective runs before the check
    with pytest.raises(ValueError, match="needs --rollout-backend vllm"):
        build("grpo", two, fsdp=True, max_staleness=1)
    with pytest.raises(ValueError, match="fsdp_replicas must be >= 1 and needs fsdp"):
        GRPOConfig(fsdp_replicas=2)
    with pytest.raises(ValueError, match="fsdp_mixed_precision must be"):
        GRPOConfig(fsdp=True, fsdp_mixed_precision="bfloat16")


def test_an_unsharded_run_refuses_a_base_loaded_empty():
    from distributed_worker import build

    from marft_algos.distributed import DistributedContext

    with pytest.raises(ValueError, match=r"loaded on the meta device \(device='meta'\)"):
        build("grpo", DistributedContext(), device="meta")
    with pytest.raises(ValueError, match="loaded on the meta device"):
        build("action", DistributedContext(rank=1, world_size=2), device="meta")


def test_a_base_loaded_empty_must_not_be_rank_0s(monkeypatch):
    # Rank 0's weights fill the other ranks' empty (meta device) bases, so rank 0 must load them.
    from distributed_worker import build

    from marft_algos.distributed import DistributedContext

    monkeypatch.setattr(DistributedContext, "max", lambda self, values: list(values))
    with pytest.raises(ValueError, match="Rank 0 loaded its base model on the meta device"):
        build("grpo", DistributedContext(rank=0, world_size=2), fsdp=True, device="meta")


@pytest.fixture(scope="module")
def tensor_parallel(tmp_path_factory):
    out = tmp_path_factory.mktemp("tensor-parallel")
    root = Path(__file__).parents[3]
    worker = str(HERE / "fsdp_worker.py")
    run_ok([sys.executable, worker, "tensor-parallel", str(out)], root)
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    run_ok([*launch, "--standalone", worker, "tensor-parallel", str(out)], root)
    return out


@pytest.mark.parametrize("kind", ["action", "grpo"])
def test_the_ranks_of_one_tensor_parallel_engine_sample_together_and_split_the_update(
    tensor_parallel, kind
):
    # Two sharded ranks share one stand-in engine (tensor_parallel_size 2): every engine call is
    # the same on both, and the same as one process's; each rank trains on half the episodes,
    # and two iterations end where the one-process run ends.
    one = torch.load(tensor_parallel / f"tp-{kind}-rank0-of1.pt")
    ranks = [torch.load(tensor_parallel / f"tp-{kind}-rank{r}-of2.pt") for r in (0, 1)]
    assert ranks[0]["calls"] == ranks[1]["calls"] == one["calls"]
    assert one["kept"] == [8, 8] and ranks[0]["kept"] == ranks[1]["kept"] == [4, 4]
    assert sum("eval/accuracy" in r for r in ranks[0]["records"]) == 2  # before and after
    assert_params_close(ranks[0]["params"], ranks[1]["params"], atol=0.0)
    assert_params_close(one["params"], ranks[0]["params"], atol=1e-6)
    for a, b in zip(one["records"], ranks[0]["records"], strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if key.startswith("train/prompt_tokens"):
                # How many of the update's prompt tokens run once depends on which rows share a
                # chunk, which the split over ranks changes.
                continue
            if isinstance(value, float):
                assert b[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
            else:
                assert b[key] == value, key


def test_a_tensor_parallel_group_must_divide_the_processes_and_run_in_sync():
    from marft_algos.distributed import DistributedContext
    from marft_algos.trainers.grpo import GRPOConfig
    from marft_algos.trainers.sharding import rollout_group

    class Engine:
        tensor_parallel_size = 2

    four = DistributedContext(rank=1, world_size=4)
    assert rollout_group(four, GRPOConfig(), Engine()) == 2
    assert rollout_group(four, GRPOConfig(), None) == 1
    with pytest.raises(ValueError, match="must divide the number of processes"):
        rollout_group(DistributedContext(rank=0, world_size=3), GRPOConfig(), Engine())
    with pytest.raises(ValueError, match="needs --max-staleness 0"):
        rollout_group(four, GRPOConfig(max_staleness=1), Engine())
    grouped = DistributedContext(rank=3, world_size=4, rollout_group=2)
    assert grouped.rollout_shard(10) == range(5, 10)  # the second group's tasks
    assert grouped.own_share(5) == range(3, 5)  # and this rank's part of them
    assert grouped.rollout_seed(7) == DistributedContext(rank=2, world_size=4).rank_seed(7)


def test_marft_train_loads_the_base_on_rank_0_alone_when_sharded():
    from marft_algos.cli.train_build import load_device
    from marft_algos.distributed import DistributedContext
    from marft_algos.trainers.grpo import GRPOConfig

    sharded = GRPOConfig(fsdp=True)
    assert load_device(sharded, DistributedContext(rank=0, world_size=2)) == "cpu"
    assert load_device(sharded, DistributedContext(rank=1, world_size=2)) == "meta"
    assert load_device(GRPOConfig(), DistributedContext(rank=1, world_size=2)) == "cpu"
