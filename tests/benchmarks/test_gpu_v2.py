"""support-desk-v2's GPU runner (benchmarks/program_team/gpu_v2.py, benchmarks/gpu/parallel.py,
carry.py): every job in its own process under its limit, each job's status and reason in
gpu_v2.json, every child killed on every exit path, and the model carried in checked parts.

The launcher runs stand-in jobs (a few lines of Python that finish, fail, hang); only the -m slow
test loads SmolLM2 (a real dry run of one job on the CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"
GPU_V2 = ROOT / "benchmarks" / "program_team" / "gpu_v2.py"
sys.path.insert(0, str(GPU))
sys.path.insert(1, str(ROOT / "benchmarks" / "program_team"))
sys.path.insert(2, str(ROOT / "benchmarks"))
import carry  # noqa: E402
import parallel  # noqa: E402
import steps_team_v2  # noqa: E402

gpu_v2 = steps_team_v2.load_gpu_v2()

#: run_v2.py's stand-in: the same flags; the setting says what it does.
FAKE_RUN_V2 = """
import argparse, json, os, sys, time
from pathlib import Path
p = argparse.ArgumentParser()
for flag in ("--jobs", "--device", "--model"):
    p.add_argument(flag)
p.add_argument("--out", type=Path)
p.add_argument("--dry-run", action="store_true")
p.add_argument("--attribution", action="store_true")
a, extra = p.parse_known_args()
setting, _, seed = a.jobs.partition(":")
(a.out / f"{setting}-seed{seed}.pid").write_text(str(os.getpid()))
if setting == "grpo":
    time.sleep(3600)
if setting == "single":
    sys.exit("single: out of memory")
run = a.out / "runs" / f"{setting}-seed{seed}"
(run / "checkpoint-1").mkdir(parents=True, exist_ok=True)
(run / "checkpoint-1" / "adapter.safetensors").write_bytes(b"weights")
(run / "metrics.jsonl").write_text("{}\\n")
row = {"peak_memory_gb": 1.5, "device": a.device, "attribution": a.attribution,
       "dry_run": a.dry_run, "extra": extra,
       "run_info": {"machine": {"gpu": "NVIDIA H200" if a.device == "cuda" else None}}}
(a.out / f"{setting}-seed{seed}.json").write_text(json.dumps(row))
"""


@pytest.fixture()
def fake(tmp_path: Path) -> Path:
    path = tmp_path / "fake_run_v2.py"
    path.write_text(FAKE_RUN_V2)
    return path


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie counts: nothing runs)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_for(check, seconds: float = 120.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_the_protocol_jobs_are_run_v2s_settings_and_seeds() -> None:
    run_v2 = pytest.importorskip("run_v2")
    seeds = run_v2.PROTOCOL["seeds"]
    tuned = [f"{s}:{k}" for s in run_v2.SETTINGS if s != "untuned" for k in seeds]
    assert sorted(gpu_v2.PROTOCOL_JOBS) == sorted(["untuned:0", *tuned])
    assert len(gpu_v2.PROTOCOL_JOBS) == 16


def test_finished_and_failed_jobs_are_recorded_and_bundled(tmp_path: Path, fake: Path) -> None:
    out = tmp_path / "out"
    argv = ["--runner", str(fake), "--model", "stand-in", "--out", str(out)]
    argv += ["--jobs", "marft:0", "untuned:0", "single:1", "--attribution", "marft"]
    argv += ["--bundle", str(tmp_path / "results.tar.gz"), "--eval-episodes", "8"]
    result = gpu_v2.main(argv)
    saved = json.loads((out / "gpu_v2.json").read_text())
    assert saved["jobs"] == result["jobs"]
    assert list(saved["jobs"]) == ["marft:0", "untuned:0", "single:1"]
    jobs = saved["jobs"]
    assert jobs["marft:0"]["status"] == "finished"
    assert jobs["marft:0"]["peak_memory_gb"] == 1.5 and jobs["marft:0"]["device"] == "NVIDIA H200"
    assert "--attribution" in jobs["marft:0"]["command"]
    assert "--attribution" not in jobs["untuned:0"]["command"]
    row = json.loads((out / "marft-seed0.json").read_text())
    assert row["attribution"] and row["extra"] == ["--eval-episodes", "8"]  # passed through
    assert jobs["single:1"]["status"] == "failed"
    assert jobs["single:1"]["reason"] == "failed: exit code 1"
    assert "out of memory" in jobs["single:1"]["stderr_tail"]
    assert saved["max_parallel"] == 3 and not saved["dry_run"]
    with tarfile.open(tmp_path / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "out/gpu_v2.json" in names and "out/runs/marft-seed0/metrics.jsonl" in names
    assert "out/logs/single-seed1.err" in names
    assert not any("checkpoint-" in n or n.endswith(".safetensors") for n in names)


def test_a_job_over_its_limit_is_killed_and_one_without_time_is_not_started(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "hang.pid"
    code = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(3600)"
    )
    hang = [sys.executable, "-c", code]
    jobs = [parallel.Job("grpo:0", hang, "grpo-seed0"), parallel.Job("grpo:1", hang, "grpo-seed1")]
    # One at a time: the first is cut at its 1-s limit, and then under MIN_START_S is left.
    deadline = parallel.MIN_START_S + 1
    records = parallel.launch(jobs, tmp_path, dict(os.environ), 1, 1.0, deadline)
    assert records["grpo:0"]["status"] == "timed out"
    assert records["grpo:0"]["reason"] == "timed out: cut at its limit (1 s)"
    assert records["grpo:1"]["status"] == "not started"
    assert records["grpo:1"]["reason"].startswith("not started: the deadline")
    assert not pid_file.is_file() or gone(int(pid_file.read_text() or 0))


def test_an_exception_kills_every_running_job(tmp_path: Path) -> None:
    pid_file = tmp_path / "hang.pid"
    code = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(3600)"
    )
    hang = [sys.executable, "-c", code]
    quick = [sys.executable, "-c", "pass"]
    jobs = [parallel.Job("hang", hang, "hang"), parallel.Job("quick", quick, "quick")]
    jobs.append(parallel.Job("later", quick, "later"))
    seen: list[dict] = []

    def report(records: dict) -> None:  # the first report (two jobs started) raises, as a bug
        seen.append({k: dict(v) for k, v in records.items()})
        if len(seen) == 1:
            wait_for(pid_file.is_file)
            raise RuntimeError("a bug in the report")

    with pytest.raises(RuntimeError, match="a bug"):
        parallel.launch(jobs, tmp_path, dict(os.environ), 2, 600.0, 600.0, report)
    final = seen[-1]
    assert final["hang"]["status"] == "killed" and "RuntimeError" in final["hang"]["reason"]
    assert final["later"]["status"] == "not started" and "RuntimeError" in final["later"]["reason"]
    assert gone(int(pid_file.read_text()))


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_jobs_die_with_the_launcher(tmp_path: Path, fake: Path, how: signal.Signals) -> None:
    out = tmp_path / "out"
    command = [sys.executable, str(GPU_V2), "--runner", str(fake), "--model", "stand-in"]
    command += ["--out", str(out), "--jobs", "grpo:0", "grpo:1"]
    launcher = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    pid_files = [out / "grpo-seed0.pid", out / "grpo-seed1.pid"]
    try:
        assert wait_for(lambda: all(p.is_file() and p.read_text() for p in pid_files))
        launcher.send_signal(how)
        launcher.wait(timeout=120)
    finally:
        launcher.kill()
    for pid in (int(p.read_text()) for p in pid_files):
        assert wait_for(lambda pid=pid: gone(pid)), f"job {pid} outlived the launcher ({how!r})"
    if how != signal.SIGKILL:  # the launcher's own record of why
        jobs = json.loads((out / "gpu_v2.json").read_text())["jobs"]
        assert {j["status"] for j in jobs.values()} == {"killed"}
        exc = "KeyboardInterrupt" if how == signal.SIGINT else "SystemExit"
        assert all(exc in j["reason"] for j in jobs.values())


def test_parts_join_to_the_file_and_a_missing_or_corrupt_part_is_named(tmp_path: Path) -> None:
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom(1000))
    parts = tmp_path / "parts"
    manifest = carry.split_file(source, parts, part_mib=300 / 2**20)
    assert [p["bytes"] for p in manifest["parts"]] == [250, 250, 250, 250]
    assert carry.join_parts(parts).read_bytes() == source.read_bytes()
    (parts / "model.gguf").unlink()
    (parts / "model.gguf.part2").unlink()
    with pytest.raises(carry.MissingPart, match=r"1 of 4 parts .*model\.gguf\.part2 \(250 bytes\)"):
        carry.join_parts(parts)
    (parts / "model.gguf.part2").write_bytes(b"\0" * 250)
    with pytest.raises(carry.MissingPart, match=r"corrupt parts: \['model\.gguf\.part2'\]"):
        carry.join_parts(parts)
    assert not (parts / "model.gguf").exists()
    with pytest.raises(carry.MissingPart, match="--pack-model"):
        carry.join_parts(tmp_path / "nothing")
    with pytest.raises(ValueError, match="part_mib=0"):
        carry.split_file(source, parts, part_mib=0)


def test_the_launcher_refuses_to_run_without_the_models_parts(tmp_path: Path) -> None:
    argv = ["--model-dir", str(tmp_path / "empty"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match=r"manifest\.json is missing"):
        gpu_v2.main(argv)
    with pytest.raises(SystemExit):
        gpu_v2.main(["--dry-run", "--attribution", "marft"])  # held-out tasks in a dry run


def test_the_suite_step_is_skipped_without_parts_and_run_only_when_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steps
    import suite

    monkeypatch.setattr(steps_team_v2, "load_gpu_v2", lambda: SimpleNamespace(PARTS=tmp_path))
    ctx = SimpleNamespace(dry_run=False, limit_s=545.0, out=tmp_path, scratch=tmp_path)
    with pytest.raises(steps.Skip, match=r"no SmolLM2 model: .*manifest\.json is missing"):
        steps_team_v2.step_team_v2(ctx)
    assert "team_v2" not in suite.parse_args([]).steps
    assert suite.parse_args(["--steps", "env", "team_v2"]).steps == ["env", "team_v2"]


@pytest.mark.slow
def test_a_real_dry_run_of_one_job(tmp_path: Path) -> None:
    from marft_algos.policy.gguf import smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    out = tmp_path / "out"
    result = gpu_v2.main(["--dry-run", "--jobs", "marft:0", "--out", str(out)])
    job = result["jobs"]["marft:0"]
    assert job["status"] == "finished", job
    assert job["device"] == "cpu" and job["peak_memory_gb"] is None
    row = json.loads((out / "marft-seed0.json").read_text())
    assert row["dry_run"] and row["train_episodes"] > 0
