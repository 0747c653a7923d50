"""``marft sft`` then ``marft train --init-from`` through the command line on the tiny model: RL
starts from exactly the SFT adapters, and a warm start for another team or model is refused in
one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from budgets import TINY
from safetensors.torch import load_file

from marft_algos.cli import train as train_command
from marft_algos.cli.main import main, run
from marft_algos.cli.sft import parse_sft_args
from marft_algos.cli.train_arguments import TrainArguments
from marft_algos.runs.checkpoint import CheckpointError
from marft_algos.trainers.sft_data import read_transcripts

SYSTEM = {"role": "system", "content": "Solve."}
ENV = TrainArguments().env  # marft train's default env: the math-dual team


def write_transcripts(path: Path) -> Path:
    """Three recorded training episodes of the math-dual team, in samples.jsonl's layout; two
    solved."""
    rows = []
    for i, (a, b, solved) in enumerate([(2, 3, True), (4, 1, True), (1, 1, False)]):
        answer = a + b if solved else a + b + 1
        problem = {"role": "user", "content": f"Problem: Compute {a} + {b}."}
        rows.append(
            {
                "episode": i,
                "split": "train",
                "team_return": float(solved),
                "correct": solved,
                "turns": [
                    {"agent": "reasoner", "messages": [SYSTEM, problem], "action": f"{a}+{b}"},
                    {
                        "agent": "actor",
                        "messages": [SYSTEM, problem],
                        "action": f"\\boxed{{{answer}}}",
                    },
                ],
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def sft_run(tiny_path, tmp_path_factory):
    """An SFT run of the math-dual team on the solved episodes."""
    folder = tmp_path_factory.mktemp("sft")
    data = write_transcripts(folder / "samples.jsonl")
    out = main(
        [
            "sft",
            "--from",
            str(data),
            "--env",
            "math-dual-v7",
            "--model",
            tiny_path,
            "--out",
            str(folder / "run"),
            "--min-reward",
            "1",
            "--num-train-epochs",
            "2",
            "--learning-rate",
            "1e-2",
            "--max-new-tokens",
            "16",
        ]
    )
    return folder / "run", out


def test_sft_writes_a_run_folder_of_the_kept_episodes(sft_run):
    run_dir, out = sft_run
    assert out["counts"]["episodes_read"] == 3 and out["counts"]["episodes_kept"] == 2
    assert out["counts"]["examples"] == 4  # each kept episode: one reply of each agent
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algorithm"] == "sft" and config["min_reward"] == 1.0
    assert config["run"]["agents"] == ["reasoner", "actor"]
    assert config["max_new_tokens"] == 16 and config["max_new_tokens_per_agent"] is None
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2]
    assert records[1]["sft/loss/actor"] < records[0]["sft/loss/actor"]
    assert (run_dir / "checkpoint-2" / "adapters" / "policy.json").is_file()
    # marft eval reads the run as any checkpoint, on the held-out problems marft train would use.
    metrics = main(["eval", str(run_dir), "--episodes", "4", "--no-before"])
    assert metrics["eval/episodes"] == 4
    assert config["run"]["data"]["eval"]["source"] == "builtin:test"


def test_rl_starts_from_exactly_the_sft_adapters(sft_run, tiny_path, tmp_path, monkeypatch):
    from peft.utils import get_peft_model_state_dict

    run_dir, _ = sft_run
    at_start: dict[str, dict] = {}
    build = train_command.build_trainer

    def recording(algo, policy, *args, **kwargs):
        for agent in policy.agents:
            state = get_peft_model_state_dict(policy.model(agent), adapter_name=agent)
            at_start[agent] = {k: v.detach().clone() for k, v in state.items()}
        return build(algo, policy, *args, **kwargs)

    monkeypatch.setattr(train_command, "build_trainer", recording)
    rl = tmp_path / "rl"
    main(
        [
            "train",
            "--init-from",
            str(run_dir),
            "--model",
            tiny_path,
            "--output-dir",
            str(rl),
            "--iterations",
            "1",
            *TINY,
            "--no-plot",
            "--progress",
            "off",
            "--trace-file",
            str(tmp_path / "trace.jsonl"),
            "--trace-content",
        ]
    )
    for agent in ("reasoner", "actor"):
        saved = load_file(
            str(run_dir / "checkpoint-2" / "adapters" / agent / "adapter_model.safetensors")
        )
        assert set(saved) == set(at_start[agent])
        assert all((saved[k] == at_start[agent][k]).all() for k in saved)
        assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)  # trained
    assert (rl / "checkpoint-1" / "manifest.json").is_file()
    assert json.loads((rl / "config.json").read_text())["run"]["init_from"] == str(run_dir)
    # The run's own trace file is a source too: every episode, with its team reward.
    traces = read_transcripts(tmp_path / "trace.jsonl")
    assert len(traces) == 12  # 4 training episodes, 4 held-out before and after
    assert all(isinstance(t.reward, float) for t in traces)
    assert [t.agent for t in traces[0].turns] == ["reasoner", "actor"]
    assert sum(t.record["attributes"]["marft.split"] == "train" for t in traces) == 4
    assert sum(t.held_out for t in traces) == 8  # marft sft leaves the evaluations' out


def test_a_warm_start_for_another_team_or_model_is_refused(sft_run, tiny_path, tmp_path):
    run_dir, _ = sft_run
    base = ["train", "--init-from", str(run_dir), "--output-dir", str(tmp_path / "rl"), *TINY]
    with pytest.raises(CheckpointError, match=r"trained agents \['reasoner', 'actor'\], and this"):
        main([*base, "--model", tiny_path, "--env", "choice-team-v1"])
    moved = shutil.copytree(tiny_path, tmp_path / "other-model")
    with pytest.raises(CheckpointError, match="trained on other base models"):
        main([*base, "--model", str(moved)])


def test_bad_sft_commands_end_in_one_line(tiny_path, tmp_path, capsys):
    data = write_transcripts(tmp_path / "calls.jsonl")
    for extra, message in [
        ([], "say whose team to fine-tune: --env ENV"),
        (["--env", "math-dual-v7", "--packing"], "--packing=True is not supported"),
        (["--agents", "solver"], "agent 'reasoner' is not in the team ['solver']"),
    ]:
        argv = ["sft", "--from", str(data), "--model", tiny_path, "--out", str(tmp_path / "s")]
        with pytest.raises(SystemExit) as exit_info:
            run([*argv, *extra])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_source_run_gives_the_model_env_lora_and_budgets(tiny_path, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_transcripts(run_dir / "samples.jsonl")
    recorded = {"env_id": ENV, "env_kwargs": {}, "model": tiny_path, "lora": {"r": 4, "alpha": 8}}
    config = {"max_new_tokens": 12, "max_new_tokens_per_agent": {"actor": 4}, "run": recorded}
    (run_dir / "config.json").write_text(json.dumps(config))
    args, sft, sources, agents = parse_sft_args(["--from", str(run_dir), "--out", "x"])
    assert (args.model, args.env, args.lora_rank, args.lora_alpha) == (tiny_path, ENV, 4, 8)
    assert (sft.max_new_tokens, sft.max_new_tokens_per_agent) == (12, {"actor": 4})
    assert sources == [str(run_dir)] and agents == ["reasoner", "actor"] and sft.output_dir == "x"
    args, sft, _, _ = parse_sft_args(["--from", str(run_dir), "--out", "x", "--lora-rank", "16"])
    assert args.lora_rank == 16  # a flag overrides the run's
