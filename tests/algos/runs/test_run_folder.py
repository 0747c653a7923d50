"""Run folders: the lock, refusing to overwrite, stale temp folders, torn metrics, changed
configs on resume, the non-finite stop, plain progress, self-describing checkpoints."""

from __future__ import annotations

import fcntl
import json
import logging

import pytest
import torch
from test_trainers import adapter_params, build

from marft_algos.policy import LoraSettings, MultiAgentPolicy
from marft_algos.runs.checkpoint import (
    CheckpointError,
    load_checkpoint,
    policy_from_checkpoint,
    read_manifest,
)
from marft_algos.runs.folder import (
    ConfigMismatchError,
    RunDirectory,
    RunExistsError,
    RunInUseError,
    TrainingDiverged,
    reading_checkpoint,
)
from marft_algos.runs.metrics import MetricsLogger
from marft_algos.trainers.action_marft import ActionMARFTTrainer


def test_a_folder_locked_by_another_process_is_refused(tmp_path):
    tmp_path.joinpath(".lock").write_text("process 4242\n")
    with open(tmp_path / ".lock") as other:  # another open file description = another holder
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(
            RunInUseError, match=r"in use by process 4242.*choose another --output-dir"
        ):
            RunDirectory(tmp_path).acquire()
    RunDirectory(tmp_path).acquire()  # free again
    RunDirectory(tmp_path).release()


def test_a_fresh_run_over_an_earlier_one_needs_overwrite(tiny_path, tmp_path):
    build("action", tiny_path, iterations=1, output_dir=str(tmp_path)).train()
    again = build("action", tiny_path, iterations=1, output_dir=str(tmp_path))
    with pytest.raises(RunExistsError, match=r"already holds a finished run \(1 of 1 iterations\)"):
        again.train()
    assert [
        json.loads(x)["iteration"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ] == [0, 1]
    build("action", tiny_path, iterations=1, output_dir=str(tmp_path), overwrite=True).train()
    # The earlier run's per-episode outcomes went with it: one record per evaluation of this one.
    outcomes = (tmp_path / "eval_outcomes.jsonl").read_text().splitlines()
    assert [json.loads(x)["iteration"] for x in outcomes] == [0, 1]


def test_checkpoints_every_iteration_keep_the_newest_and_describe_the_run(tiny_path, tmp_path):
    (tmp_path / ".checkpoint-7.tmp-abc").mkdir(parents=True)
    (tmp_path / ".checkpoint-6.old-abc").mkdir(parents=True)
    (tmp_path / ".metrics.jsonl.x1.tmp").write_text("{")
    trainer = build("action", tiny_path, iterations=3, output_dir=str(tmp_path))
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".lock"]
    trainer.train()
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    manifest = read_manifest(tmp_path / "checkpoint-3")
    assert manifest["lora"]["answerer"]["r"] == 8 and manifest["lora"]["answerer"]["alpha"] == 16
    assert manifest["run"]["algorithm"] == "action-marft"
    assert manifest["run"]["generation"]["max_new_tokens"] == 6
    rebuilt = policy_from_checkpoint(str(tmp_path / "checkpoint-3"))
    for agent in trainer.agents:
        for a, b in zip(
            adapter_params(trainer, agent).values(),
            rebuilt.trainable_parameters(agent),
            strict=True,
        ):
            assert torch.equal(a, b)


def test_a_lora_rank_that_differs_from_the_checkpoint(tiny_path, tmp_path):
    build("action", tiny_path, iterations=1, output_dir=str(tmp_path)).train()
    policy = MultiAgentPolicy.from_pretrained(
        tiny_path, ["writer", "answerer"], lora=LoraSettings(r=4)
    )
    with pytest.raises(
        CheckpointError,
        match=r"LoRA rank of adapter 'writer' differs: checkpoint 8 vs policy 4.*--lora-rank 8",
    ):
        load_checkpoint(tmp_path / "checkpoint-1", policy)


def test_resume_refuses_changed_settings_and_leaves_the_folder_alone(tiny_path, tmp_path):
    build("action", tiny_path, iterations=1, output_dir=str(tmp_path)).train()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    changed = build("action", tiny_path, iterations=2, output_dir=str(tmp_path), learning_rate=0.5)
    with pytest.raises(ConfigMismatchError, match=r"learning_rate: checkpoint 0.005 vs now 0.5"):
        changed.resume()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    allowed = build("action", tiny_path, iterations=2, output_dir=str(tmp_path), learning_rate=0.5)
    allowed.resume(allow_config_change=True)
    allowed.train()
    assert json.loads((tmp_path / "config.json").read_text())["learning_rate"] == 0.5


def test_resume_before_the_first_checkpoint_starts_over(tiny_path, tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"iteration": 0, "eval/accuracy": 0.5}\n{"iteration": 1, "rollout/re'
    )
    trainer = build("action", tiny_path, iterations=1, output_dir=str(tmp_path))
    trainer.resume()
    trainer.train()
    assert [
        json.loads(x)["iteration"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ] == [0, 1]


def test_metrics_tolerate_only_a_torn_last_line(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0}\n{"iteration": 1}\n{"iteration": 2, "eval/acc')
    log = MetricsLogger(tmp_path)
    with caplog.at_level(logging.WARNING):
        log.truncate_after(5)
    assert "torn last line" in caplog.text
    assert [r["iteration"] for r in log.records] == [0, 1]
    assert path.read_text() == '{"iteration": 0}\n{"iteration": 1}\n'
    path.write_text('{"iteration": 0}\nnot json\n{"iteration": 2}\n')
    with pytest.raises(ValueError, match=r"Line 2 of .*metrics.jsonl is not JSON"):
        log.truncate_after(5)


def test_a_run_whose_updates_are_all_nonfinite_stops(tiny_path, monkeypatch):
    def never_finite(self, agents):
        self.zero_grad()
        return float("nan"), False

    monkeypatch.setattr(ActionMARFTTrainer, "step_policy", never_finite)
    trainer = build("action", tiny_path, iterations=5, max_nonfinite_iterations=2)
    with pytest.raises(
        TrainingDiverged,
        match=r"last 2 iterations \(up to iteration 2\).*not finite.*Lower learning_rate",
    ):
        trainer.train()
    assert trainer.iteration == 1  # stopped inside the second iteration


def test_plain_progress_logs_one_line_per_iteration(tiny_path, caplog):
    trainer = build("action", tiny_path, iterations=2)
    with caplog.at_level(logging.INFO, logger="marft_algos.runs.progress"):
        trainer.train(progress="plain")
    lines = [r.getMessage() for r in caplog.records if r.name == "marft_algos.runs.progress"]
    lines = [line for line in lines if line.startswith("iteration")]
    assert [line.split()[1] for line in lines] == ["0/2", "1/2", "2/2"]
    assert "policy_loss=" in lines[1]


def test_a_tokenizer_without_a_chat_template_warns(tiny_path, tmp_path, caplog):
    import shutil

    from marft_algos.policy.backbone import load_backbone

    folder = tmp_path / "no-template"
    shutil.copytree(tiny_path, folder)
    for file in folder.glob("chat_template.*"):
        file.unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.WARNING):
        load_backbone(str(folder))
    assert "has no chat template" in caplog.text and "--chat-template" in caplog.text


def test_close_releases_the_folder(tiny_path, tmp_path):
    trainer = build("action", tiny_path, iterations=1, output_dir=str(tmp_path))
    with open(tmp_path / ".lock") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    trainer.close()
    with open(tmp_path / ".lock") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _fake_checkpoints(run: RunDirectory, numbers: range) -> list:
    run.path.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        folder = run.path / f"checkpoint-{n}"
        folder.mkdir()
        (folder / "manifest.json").write_text("{}")
        (folder / "state.json").write_text("{}")
    return [run.path / f"checkpoint-{n}" for n in numbers]


def test_a_checkpoint_being_read_is_kept_until_the_next_prune(tmp_path):
    # marft eval of a run still training: the trainer pruned the checkpoint it was loading.
    run = RunDirectory(tmp_path / "run")
    first, second, third = _fake_checkpoints(run, range(1, 4))
    with reading_checkpoint(first) as still_there:
        assert still_there
        assert run.prune(1) == [second]
        assert first.is_dir() and third.is_dir() and not second.exists()
    assert run.prune(1) == [first]
    assert sorted(p.name for p in run.path.iterdir()) == ["checkpoint-3"]


def test_a_reader_learns_that_its_checkpoint_went_before_it_was_pinned(tmp_path, monkeypatch):
    from marft_algos.cli import eval_checkpoints

    run = RunDirectory(tmp_path / "run")
    gone, newest = _fake_checkpoints(run, range(1, 3))
    with reading_checkpoint(gone):
        pass
    run.prune(1)
    with reading_checkpoint(gone) as still_there:
        assert not still_there
    found = iter([gone, newest])
    monkeypatch.setattr(eval_checkpoints, "find_checkpoint", lambda path: next(found))
    with eval_checkpoints.open_checkpoint(run.path) as checkpoint:
        assert checkpoint == newest
    run.clean_stale()  # the lock file the late reader left is removed; a live one's is kept
    assert sorted(p.name for p in run.path.iterdir()) == [".checkpoint-2.read", "checkpoint-2"]


def test_pruning_a_linked_checkpoint_removes_the_link_and_keeps_its_target(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (target,) = _fake_checkpoints(RunDirectory(elsewhere), range(1, 2))
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    (run.path / "checkpoint-1").symlink_to(target, target_is_directory=True)
    _fake_checkpoints(run, range(2, 4))
    assert run.prune(1) == [run.path / "checkpoint-1", run.path / "checkpoint-2"]
    assert sorted(p.name for p in run.path.iterdir()) == ["checkpoint-3"]  # no '.old-' link left
    assert (target / "manifest.json").is_file()  # not this run's files to delete


def test_torch_saves_short_write_is_a_full_disk(tmp_path):
    # torch.save of optimizer state on a full disk: its zip writer's own words, not an OSError.
    from marft_algos.runs.folder import DiskFullError, disk_full_error

    raw = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4736 vs 4624")
    full = disk_full_error(raw, tmp_path)
    assert isinstance(full, DiskFullError)
    assert str(tmp_path) in str(full) and "--resume" in str(full)
    assert disk_full_error(RuntimeError("shape mismatch"), tmp_path) is None
