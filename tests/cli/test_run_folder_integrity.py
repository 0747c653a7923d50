"""Run folders that verify themselves (issue 27): checksums per checkpoint file, a resume and an
evaluation that fall back to the newest checkpoint that verifies, a full disk reported in one
line with the folder left resumable, and the training data pinned by absolute path and hash."""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from budgets import TINY

from marft_algos.cli.evaluate import find_checkpoint
from marft_algos.cli.main import main
from marft_algos.runs.checkpoint import (
    CorruptCheckpointError,
    newest_valid_checkpoint,
    read_manifest,
    verify_checkpoint,
)

ROOT = Path(__file__).resolve().parents[2]
BUDGET = [*TINY, "--eval-every", "1", "--no-plot", "--progress", "off"]


def records(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _flip(checkpoint: Path) -> None:
    file = checkpoint / "adapters" / "actor" / "adapter_model.safetensors"
    data = bytearray(file.read_bytes())
    data[-100] ^= 0xFF  # one weight's byte: same size, still a readable file
    file.write_bytes(bytes(data))


def _truncate(checkpoint: Path) -> None:
    file = checkpoint / "adapters" / "actor" / "adapter_model.safetensors"
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def _drop_manifest(checkpoint: Path) -> None:
    (checkpoint / "manifest.json").unlink()


def _empty(checkpoint: Path) -> None:
    import shutil

    shutil.rmtree(checkpoint)
    checkpoint.mkdir()


DAMAGE = {"flip": _flip, "truncate": _truncate, "no-manifest": _drop_manifest, "empty": _empty}


@pytest.fixture(scope="module")
def straight(tiny_path, tmp_path_factory):
    """An uninterrupted 3-iteration run."""
    run = tmp_path_factory.mktemp("straight") / "run"
    main(["train", "--model", tiny_path, "--iterations", "3", "--output-dir", str(run), *BUDGET])
    return run


def test_checkpoints_record_a_checksum_per_file(straight):
    manifest = read_manifest(straight / "checkpoint-3")
    assert set(manifest["sha256"]) == set(manifest["files"])
    assert all(len(h) == 64 for h in manifest["sha256"].values())
    verify_checkpoint(straight / "checkpoint-3")


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_newest_checkpoint_resumes_from_the_one_before(
    damage, straight, tiny_path, tmp_path, caplog
):
    run = tmp_path / "run"
    common = ["--model", tiny_path, "--output-dir", str(run), *BUDGET]
    main(["train", "--iterations", "2", *common])  # as if stopped after checkpoint-2
    DAMAGE[damage](run / "checkpoint-2")
    with pytest.raises(CorruptCheckpointError, match=r"adapters/actor/adapter_model.safetensors"):
        verify_checkpoint(run / "checkpoint-2")
    with caplog.at_level(logging.WARNING):
        result = main(["train", "--iterations", "3", "--resume", *common])
    assert "checkpoint-2" in caplog.text and "using checkpoint-1" in caplog.text
    assert result["records"][0]["iteration"] == 2  # iteration 2 was done again, from checkpoint-1
    assert records(run) == records(straight)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_resume_and_eval_skip_every_kind_of_damage(damage, straight, tmp_path, caplog):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(straight, run)
    DAMAGE[damage](run / "checkpoint-3")
    with caplog.at_level(logging.WARNING):
        chosen, skipped = newest_valid_checkpoint(run)
        assert find_checkpoint(run) == run / "checkpoint-2"  # what marft eval evaluates
    assert chosen == run / "checkpoint-2"
    assert len(skipped) == 1 and skipped[0].startswith("checkpoint-3: ")
    assert "checkpoint-3" in caplog.text


def test_no_verifying_checkpoint_stops_instead_of_starting_over(straight, tiny_path, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(straight, run)
    _truncate(run / "checkpoint-3")
    _flip(run / "checkpoint-2")
    before = records(run)
    argv = ["--model", tiny_path, "--iterations", "4", "--output-dir", str(run), *BUDGET]
    with pytest.raises(CorruptCheckpointError, match=r"No checkpoint in .* verifies.*--overwrite"):
        main(["train", "--resume", *argv])
    with pytest.raises(ValueError, match=r"No checkpoint in .* verifies"):
        find_checkpoint(run)
    assert records(run) == before  # nothing thrown away


def _cli(*args: str, cwd: Path, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    def small_files() -> None:  # a file-size limit: a write past it fails with EFBIG
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-m", "marft_algos.cli", *args],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        preexec_fn=small_files,
        timeout=600,
    )


def test_a_full_disk_is_one_line_and_the_folder_stays_resumable(tiny_path, tmp_path):
    run = tmp_path / "run"
    common = ["--model", tiny_path, "--output-dir", str(run), *BUDGET]
    first = _cli("train", "--iterations", "1", *common, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = sorted(p.name for p in run.iterdir())
    # Checkpoint files are about 100 kB; config.json and metrics.jsonl stay below the limit.
    result = _cli(
        "train", "--iterations", "2", "--resume", *common, cwd=tmp_path, limit_bytes=48_000
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith(f"marft train: error: no space left at {str(run)!r}: free space")
    assert "--resume" in errors[0]
    assert sorted(p.name for p in run.iterdir()) == before  # no half checkpoint, no temp folder
    verify_checkpoint(run / "checkpoint-1")
    main(["train", "--iterations", "2", "--resume", *common])
    assert [r["iteration"] for r in records(run)] == [0, 1, 2]
    verify_checkpoint(run / "checkpoint-2")


def _problems(path: Path, offset: int) -> None:
    rows = [{"problem": f"What is {i} + {offset}?", "answer": str(i + offset)} for i in range(20)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_relative_dataset_is_pinned_by_absolute_path_and_hash(tiny_path, tmp_path, monkeypatch):
    from marft_algos.cli.data import family_of, load_part
    from marft_algos.cli.evaluate import evaluate_checkpoint

    first = tmp_path / "a"
    _problems(first / "data" / "p.jsonl", 0)
    monkeypatch.chdir(first)
    run = tmp_path / "run"
    argv = ["--model", tiny_path, "--iterations", "1", "--output-dir", str(run), *BUDGET]
    main(["train", "--env", "math-single-v7", "--dataset", "data/p.jsonl", *argv])
    plan = json.loads((run / "config.json").read_text())["run"]["data"]
    pinned = str((first / "data" / "p.jsonl").resolve())
    assert plan["train"]["source"] == plan["eval"]["source"] == pinned
    assert len(plan["eval"]["sha256"]) == 64

    # Another directory with another data/p.jsonl: the run's own file is the one read.
    other = tmp_path / "b"
    _problems(other / "data" / "p.jsonl", 100)
    monkeypatch.chdir(other)
    golds = {p.answer for p in load_part(family_of("math-single-v7"), plan["eval"])}
    assert golds and all(int(g) < 100 for g in golds)
    assert evaluate_checkpoint(run / "checkpoint-1")["eval/episodes"] == len(golds)

    # The recorded file changed: refused, naming the file and the fix.
    _problems(first / "data" / "p.jsonl", 7)
    with pytest.raises(ValueError, match=r"changed since the run recorded it.*--dataset FILE"):
        evaluate_checkpoint(run / "checkpoint-1")


def test_eval_refuses_a_checkpoint_that_another_run_wrote(straight, tmp_path):
    # Another run's checkpoint copied into a run folder was evaluated silently; --resume refuses.
    import shutil

    from marft_algos.cli.parsing import UsageError

    run = tmp_path / "run"
    shutil.copytree(straight, run)
    config = json.loads((run / "config.json").read_text())
    config["seed"] += 1  # the folder's run is another one than the checkpoint's
    (run / "config.json").write_text(json.dumps(config))
    seed = config["seed"]
    with pytest.raises(
        UsageError,
        match=rf"checkpoint-3 in .* not written by the run .*seed: run {seed} vs checkpoint "
        rf"{seed - 1}.*pass the checkpoint folder itself",
    ):
        find_checkpoint(run)
    assert find_checkpoint(run / "checkpoint-3") == run / "checkpoint-3"  # asked for by name
    assert find_checkpoint(straight) == straight / "checkpoint-3"


def test_a_checkpoint_without_checksums_is_said_to_be_unverified(straight, tmp_path, caplog):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(straight, run)
    manifest_file = run / "checkpoint-3" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    del manifest["sha256"]  # the format before checksums
    manifest_file.write_text(json.dumps(manifest))
    _flip(run / "checkpoint-3")
    with caplog.at_level(logging.WARNING):
        assert find_checkpoint(run) == run / "checkpoint-3"
    assert "checkpoint-3 was written before checksums were recorded" in caplog.text
    assert "cannot be verified" in caplog.text


def test_a_resume_says_which_metrics_records_are_gone(straight, tiny_path, tmp_path, caplog):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(straight, run)
    (run / "metrics.jsonl").unlink()
    argv = ["--model", tiny_path, "--iterations", "4", "--output-dir", str(run), *BUDGET]
    with caplog.at_level(logging.WARNING):
        main(["train", "--resume", *argv])
    assert "metrics.jsonl lacks the records of 3 of the 3 iterations" in caplog.text


def test_an_invalid_config_json_is_named(straight, tiny_path, tmp_path):
    import shutil

    from marft_algos.runs.folder import RunDirectoryError

    run = tmp_path / "run"
    shutil.copytree(straight, run)
    (run / "config.json").write_text("{not json")
    argv = ["--model", tiny_path, "--iterations", "4", "--output-dir", str(run), *BUDGET]
    with pytest.raises(RunDirectoryError, match=r"config.json' is not valid JSON .*--overwrite"):
        main(["train", "--resume", *argv])


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_a_seed_out_of_range_names_the_flag(seed, tiny_path, tmp_path):
    with pytest.raises(ValueError, match=rf"seed \(--seed\) must be an integer from 0 .*{seed}"):
        main(["train", "--model", tiny_path, "--seed", seed, "--output-dir", str(tmp_path / "r")])
