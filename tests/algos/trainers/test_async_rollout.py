"""Asynchronous rollouts (``max_staleness >= 1``): one-step-stale batches trained with the
decoupled objective, exact resume with the in-flight batch, a dead worker stopping the run with
its error and no process left behind, and the settings it refuses."""

from __future__ import annotations

import copy
import dataclasses
import json
import multiprocessing
import os
import signal
import threading
import types

import pytest
import torch
from recording import train_recording
from test_trainers import adapter_params, build
from trainer_envs import DigitsEnv

from marft_algos.rollout.worker import RolloutWorkerError
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer


def _without_times(records):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


@pytest.mark.parametrize(
    ("kind", "passes"),
    # Both trainers and both ways to the proximal log-probs in the fast suite; the two other
    # pairings with -m slow.
    [
        ("action", 1),
        ("grpo", 2),
        pytest.param("action", 2, marks=pytest.mark.slow),
        pytest.param("grpo", 1, marks=pytest.mark.slow),
    ],
)
def test_an_async_run_trains_each_batch_one_version_stale(kind, passes, tiny_path):
    epochs = {"ppo_epochs" if kind == "action" else "num_iterations": passes}
    trainer = build(kind, tiny_path, iterations=3, max_staleness=1, **epochs)
    # One pass over one minibatch: the update's own forward gives the proximal log-probs.
    assert trainer.single_policy_step() == (passes == 1)
    seen = []

    def record(episodes):
        decisions = [d for e in episodes for d in e.decisions]
        nonzero = None
        if kind == "grpo":  # the decisions whose advantage is not 0
            batch = trainer.rollout_batch(episodes)
            advantages, _ = trainer.batch_advantages(episodes, batch)
            nonzero = [bool(a != 0) for a in advantages]
        seen.append((trainer.iteration, decisions, nonzero))

    records = train_recording(trainer, record)
    assert [r.get("rollout/staleness") for r in records] == [None, 0.0, 1.0, 1.0]
    assert [r.get("rollout/staleness_max") for r in records[1:]] == [0, 1, 1]
    assert all(r["rollout/dropped_stale"] == 0 for r in records[1:])
    for iteration, decisions, nonzero in seen:
        version = max(iteration - 1, 0)  # the first batch is fresh, the others one update old
        assert {d.policy_version for d in decisions} == {version}
        if iteration == 0:
            assert all(d.proximal_log_probs is None for d in decisions)
            assert not any(d.proximal_from_update for d in decisions)
            continue
        # Stale: proximal log-probs under the weights of this update (which the last update
        # moved) for every decision whose loss has a gradient; GRPO skips zero advantages.
        wanted = [True] * len(decisions) if nonzero is None else nonzero
        if passes == 1:  # marked, and no separate forward pass made
            assert [d.proximal_from_update for d in decisions] == wanted
            assert all(d.proximal_log_probs is None for d in decisions)
            continue
        assert not any(d.proximal_from_update for d in decisions)
        assert [d.proximal_log_probs is not None for d in decisions] == wanted
        with_prox = [d for d in decisions if d.proximal_log_probs is not None]
        assert all(len(d.proximal_log_probs) == len(d.action_ids) for d in with_prox)
        if with_prox:
            gap = max(
                abs(p - b)
                for d in with_prox
                for p, b in zip(d.proximal_log_probs, d.log_probs, strict=True)
            )
            assert gap > 1e-4
    marked = [
        (d.proximal_log_probs is not None, d.proximal_from_update) for _, ds, _ in seen for d in ds
    ]
    assert (True, False) in marked if passes == 2 else (False, True) in marked
    assert trainer.async_rollouts.worker is None  # stopped when train() returned


def test_progress_counts_the_tokens_the_worker_generated(tiny_path, caplog):
    trainer = build("grpo", tiny_path, iterations=2, max_staleness=1)
    try:
        with caplog.at_level("INFO", logger="marft_algos.runs.progress"):
            trainer.train(progress="plain")
    finally:
        trainer.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "marft_algos.runs.progress"]
    ends = [line for line in lines if line.startswith(("iteration 1/2", "iteration 2/2"))]
    rates = [float(line.split("| rollout ")[1].split()[0]) for line in ends]
    assert len(rates) == 2 and all(rate > 0 for rate in rates), lines


def test_a_too_stale_batch_is_dropped_and_sampled_again(tiny_path, caplog):
    trainer = build("grpo", tiny_path, iterations=2, max_staleness=1)
    try:
        trainer.train_iteration()  # iteration 2's batch is on its way, sampled by version 0
        trainer.iteration += 1  # as if another update had happened meanwhile: two versions old
        with caplog.at_level("WARNING", logger="marft_algos.trainers.async_rollout"):
            episodes, stats = trainer.async_rollouts.next_batch()
    finally:
        trainer.close()
    assert stats["rollout/dropped_stale"] == 1 and stats["rollout/staleness"] == 0.0
    assert "dropping a batch sampled by version 0, 2 updates old" in caplog.text
    assert {d.policy_version for e in episodes for d in e.decisions} == {2}


def test_resume_continues_with_the_saved_in_flight_batch_exactly(tiny_path, tmp_path):
    def run(output_dir, **kwargs):
        return build(
            "grpo", tiny_path, iterations=4, max_staleness=1, output_dir=output_dir, **kwargs
        )

    straight = run(str(tmp_path / "straight"))
    try:
        expected = straight.train()
    finally:
        straight.close()

    class Interrupted(Exception):
        pass

    first = run(str(tmp_path / "cut"))
    save = first.save_checkpoint

    def save_then_stop(directory):
        out = save(directory)
        if first.iteration == 2:
            raise Interrupted  # killed after the checkpoint, iteration 3's batch in flight
        return out

    first.save_checkpoint = save_then_stop
    with pytest.raises(Interrupted):
        first.train()
    first.close()
    assert first.async_rollouts.worker is None  # stopped on the error path too
    state = json.loads((tmp_path / "cut" / "checkpoint-2" / "state.json").read_text())
    # Iteration 3's batch, sampled by the adapters after one update while the second ran.
    assert state["in_flight"]["version"] == 1 and len(state["in_flight"]["episodes"]) == 4

    second = run(str(tmp_path / "cut"))
    second.resume()
    try:
        resumed = second.train()
    finally:
        second.close()
    assert _without_times(resumed) == _without_times(expected[3:])
    for agent in ("writer", "answerer"):
        for name, value in adapter_params(straight, agent).items():
            assert torch.equal(value, adapter_params(second, agent)[name]), name


class FailsInWorker(DigitsEnv):
    """Fails on reset in a child process (the rollout worker), works in the trainer."""

    def reset(self, seed=None, options=None):
        if multiprocessing.parent_process() is not None:
            raise RuntimeError("the env broke in the worker")
        return super().reset(seed=seed, options=options)


def test_an_error_in_the_worker_stops_the_run_with_it(tiny_path):
    trainer = build("grpo", tiny_path, iterations=2, max_staleness=1)
    trainer.env_fn = lambda: FailsInWorker(team=2)
    with pytest.raises(RolloutWorkerError, match="the env broke in the worker"):
        trainer.train()
    trainer.close()


def test_failed_programs_in_the_worker_stop_the_run_as_in_a_synchronous_run(tiny_path):
    from marft_algos.rollout.collector import ProgramFailures
    from marft_envs.programs import ProgramEnv

    def fails(task, client):
        client.chat.completions.create(
            model="answerer", messages=[{"role": "user", "content": task}]
        )
        raise KeyError("no such field")

    trainer = build("grpo", tiny_path, team=1, iterations=2, max_staleness=1)
    trainer.env_fn = lambda: ProgramEnv(fails, ["answerer"], [f"t{i}" for i in range(8)])
    with pytest.raises(ProgramFailures, match="no such field") as caught:
        trainer.train()
    trainer.close()
    assert (
        caught.value.failed and caught.value.failed[0].info["program_error"]["type"] == "KeyError"
    )


def test_a_killed_worker_stops_the_run_and_leaves_no_process(tiny_path):
    trainer = build("grpo", tiny_path, iterations=3, max_staleness=1)
    update = trainer.update
    pids = []

    def kill_worker_then_update(episodes):
        pids.append(trainer.async_rollouts.worker.pid)
        os.kill(pids[-1], signal.SIGKILL)
        return update(episodes)

    trainer.update = kill_worker_then_update
    with pytest.raises(RolloutWorkerError, match=r"died with exit code -9"):
        trainer.train()
    trainer.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)  # reaped: not even a zombie is left


def test_settings_async_rollouts_cannot_run_with_are_refused(tiny_path):
    with pytest.raises(ValueError, match="max_staleness must be >= 0"):
        GRPOConfig(max_staleness=-1)
    with pytest.raises(ValueError, match="behaviour_weight_cap must be > 0"):
        GRPOConfig(behaviour_weight_cap=0.0)
    with pytest.raises(ValueError, match=r"dynamic_sampling .* max_staleness=1"):
        build("grpo", tiny_path, max_staleness=1, dynamic_sampling=True)
    # An engine that sleeps through the update cannot generate during it: the fix is named.
    trainer = build("grpo", tiny_path)
    backend = StandInEngine(trainer.policy)
    backend.settings = types.SimpleNamespace(sleep_mode=True)
    with pytest.raises(ValueError, match=r"without sleep mode \(drop --vllm-sleep-mode\)"):
        GRPOTrainer(trainer.policy, trainer.env_fn, _async(trainer), rollout_backend=backend)


def _async(trainer, **changes):
    return dataclasses.replace(trainer.config, max_staleness=1, **changes)


class StandInEngine:
    """A rollout backend with its own copy of the policy, as an inference engine holds its own
    weights: ``sync_adapters`` copies the trained adapters in. It records on which thread each
    call ran, and fails if a sync or a sleep meets a running generation."""

    def __init__(self, policy):
        self.own = copy.deepcopy(policy)
        self.events = []
        self.generating = threading.Lock()

    def generate(self, agent, messages_batch, settings, *, generator=None):
        with self.generating:
            self.events.append(("generate", threading.current_thread().name))
            return self.own.generate(agent, messages_batch, settings, generator=generator)

    def sync_adapters(self, policy, version):
        assert self.generating.acquire(blocking=False), "synced while generating"
        try:
            for agent in policy.agents:
                mine = self.own.trainable_parameters(agent)
                with torch.no_grad():
                    for p, q in zip(mine, policy.trainable_parameters(agent), strict=True):
                        p.copy_(q)
            self.events.append(("sync", version, threading.current_thread().name))
        finally:
            self.generating.release()

    def sleep(self):
        self.events.append(("sleep",))


def test_an_async_run_on_a_rollout_engine_generates_in_a_thread_between_syncs(tiny_path):
    trainer = build("grpo", tiny_path)
    backend = StandInEngine(trainer.policy)
    config = _async(trainer, iterations=3)
    trainer = GRPOTrainer(trainer.policy, trainer.env_fn, config, rollout_backend=backend)
    seen = []
    records = train_recording(
        trainer,
        lambda episodes: seen.append({d.policy_version for e in episodes for d in e.decisions}),
    )
    assert [r["rollout/staleness"] for r in records] == [0.0, 1.0, 1.0]
    assert seen == [{0}, {0}, {1}]  # a job submitted after update k samples version k
    assert all(r.get("train/skipped_nonfinite", 0) == 0 for r in records)
    syncs = [e for e in backend.events if e[0] == "sync"]
    # On the main thread, before the job that samples with them; never after the last update.
    assert [(v, name) for _, v, name in syncs] == [(0, "MainThread"), (1, "MainThread")]
    assert {e[1] for e in backend.events if e[0] == "generate"} == {"marft-engine"}
    assert ("sleep",) not in backend.events  # the engine generates through the update
    assert trainer.async_rollouts.worker is None  # the thread ended with train()


def test_staleness_zero_keeps_the_synchronous_loop(tiny_path):
    trainer = build("grpo", tiny_path, iterations=1)
    assert trainer.async_rollouts is None
    record = trainer.train()[-1]
    assert "rollout/staleness" not in record and "rollout/dropped_stale" not in record
