"""support-desk-v2's step-4 runner (benchmarks/program_team/run_v2.py): the protocol's settings
build valid trainer configs at the fixed budget, the independent setting pays each agent its own
reward, and the hand-off statistics count what the transcripts show."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "program_team"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
# benchmarks/real_team has a ``summarize`` module too: import this folder's, then leave the name
# as it was, so neither test module gets the other's.
_theirs = sys.modules.pop("summarize", None)
run_v2 = pytest.importorskip("run_v2")
summarize = pytest.importorskip("summarize")
del sys.modules["summarize"]
if _theirs is not None:
    sys.modules["summarize"] = _theirs
team_v2 = pytest.importorskip("team_v2")
desk_handoffs = pytest.importorskip("desk_handoffs")
independent = pytest.importorskip("independent")

from desk_episodes import play_rewards  # noqa: E402

from marft_algos.cli import ALGORITHMS  # noqa: E402
from marft_algos.rollout.branch_settings import branch_levels, episodes_per_tree  # noqa: E402


def protocol_args(tmp_path):
    parser = argparse.ArgumentParser()
    run_v2.job_arguments(
        parser,
        run_v2.MODEL,
        tmp_path,
        eval_episodes=run_v2.PROTOCOL["eval_episodes"],
        num_generations=run_v2.PROTOCOL["num_generations"],
        temperature=run_v2.PROTOCOL["temperature"],
        **{k: run_v2.PROTOCOL[k] for k in ("iterations", "episodes_per_iteration", "eval_every")},
    )
    return parser.parse_args(["--jobs", "marft:0"])


@pytest.mark.parametrize("name", sorted(run_v2.SETTINGS))
def test_every_setting_builds_its_config_at_the_protocols_budget(name, tmp_path):
    setting = run_v2.SETTINGS[name]
    settings = run_v2.trainer_settings(name, 1, protocol_args(tmp_path))
    config = ALGORITHMS[setting.algorithm or "action-marft"][0](**settings)
    assert config.iterations * config.episodes_per_iteration == 1008
    assert config.temperature == team_v2.TEMPERATURE and config.seed == 1
    assert config.eval_episodes == 200 and config.eval_every == 0
    if setting.branch is not None:
        assert config.episodes_per_iteration % episodes_per_tree(branch_levels(config.branch)) == 0
    if name in ("marft", "grpo", "independent"):
        assert config.agent_learning_rates == {"router": 1e-4, "reviewer": 0.0}
        assert config.branch == {"router": {"width": 3, "rollouts": 4}}
    if name == "grpo-plain":
        assert config.branch is None and config.num_generations == 4
        assert not config.agent_learning_rates and config.learning_rate == 5e-4
    if name == "single":
        assert config.max_new_tokens_per_agent == {team_v2.SINGLE_AGENT: 24}


def test_the_independent_desk_pays_each_agent_its_local_reward():
    env = independent.independent_env(team_v2, team_v2.make_tasks("train"), team_v2.test_tasks())
    env.reset(seed=5)
    task = env.unwrapped.task
    wrong = next(d for d in team_v2.DEPARTMENTS if d != task["department"])
    replies = {"router": json.dumps({"route": wrong}), "reviewer": "APPROVE"}
    rewards = play_rewards(env, lambda agent, messages: replies.get(agent, "I do not know."))
    # Wrong route: the router earns 0, the specialist's wrong answer 0, the reviewer approved a
    # wrong answer (a false approval): 0; nobody else was called.
    assert rewards["router"] == rewards[wrong] == rewards["reviewer"] == 0.0
    env.close()


def row(route_reply, parts, calls):
    return {
        "info": {"reward_parts": parts, "calls": calls},
        "turns": [{"agent": "router", "action": route_reply}],
    }


def test_the_handoff_statistics_count_routes_verdicts_and_calls():
    rows = [
        row(
            '{"route": "billing"}',
            {"success": 1.0, "parsed": 1.0, "routed": 1.0},
            {"router": 1, "billing": 1, "reviewer": 1},
        ),
        row(
            '{"route": "shipping"}',
            {"success": 0.0, "parsed": 1.0, "false_rejection": 1.0},
            {"router": 1, "shipping": 2, "reviewer": 1},
        ),
        row("no idea", {"success": 0.0, "parsed": 0.0}, {"router": 1}),
    ]
    stats = desk_handoffs.handoffs(rows)
    assert stats["episodes"] == 3 and stats["reviewed"] == 2
    assert stats["success"] == pytest.approx(1 / 3) and stats["routed"] == pytest.approx(1 / 3)
    assert stats["parse_failure"] == pytest.approx(1 / 3)
    assert stats["success_given_right_route"] == 1.0  # the one right route succeeded
    assert stats["false_rejection"] == pytest.approx(1 / 2)  # of the reviewed episodes
    assert stats["routes"] == pytest.approx(
        {"billing": 1 / 3, "shipping": 1 / 3, "accounts": 0.0, "None": 1 / 3}
    )
    assert stats["calls"] == pytest.approx(8 / 3)
    assert stats["calls_per_agent"]["reviewer"] == pytest.approx(2 / 3)


def test_the_single_agents_routes_are_read_from_its_first_reply():
    rows = [row('{"route": "accounts"}', {"success": 1.0, "parsed": 1.0}, {"assistant": 3})]
    assert desk_handoffs.handoffs(rows)["routes"]["accounts"] == 1.0


def test_a_dry_run_never_evaluates_on_held_out_tasks(monkeypatch):
    made = []
    monkeypatch.setattr(run_v2.marft_envs, "make", lambda env_id, split: made.append(split))
    for setting in run_v2.SETTINGS.values():
        run_v2.env_fn(setting, "test", dry_run=True)()
        if not setting.independent:
            run_v2.env_fn(setting, "test")()
    assert made == ["train", "test"] * 5  # the independent desk trains on its own env


def test_attribution_is_refused_with_a_dry_run(capsys):
    with pytest.raises(SystemExit):
        run_v2.main(["--dry-run", "--attribution", "--jobs", "marft:0"])
    assert "held-out" in capsys.readouterr().err


def run_folder(root, name, iterations, evals):
    """A run folder as run_v2.py leaves it: config, metrics (an untuned job has neither: its
    record beside the folder holds the curve), and one transcript an evaluation (``evals``:
    iteration -> success of its one episode)."""
    folder = root / name
    folder.mkdir(parents=True)
    metrics = [{"iteration": i, "eval/accuracy": ok} for i, ok in evals.items()]
    if name.startswith("untuned-"):
        curve = [[m["iteration"], m["eval/accuracy"]] for m in metrics]
        (root / f"{name}.json").write_text(json.dumps({"curve": curve}))
    else:
        (folder / "config.json").write_text(json.dumps({"iterations": iterations}))
        (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    samples = [
        {
            "iteration": i,
            **row('{"route": "billing"}', {"success": ok, "parsed": 1.0}, {"router": 1}),
        }
        for i, ok in evals.items()
    ]
    (folder / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


def test_the_v2_summary_reads_the_untuned_job_and_names_what_did_not_run(tmp_path):
    run_folder(tmp_path, "untuned-seed0", 21, {0: 0.0})
    run_folder(tmp_path, "marft-seed0", 21, {0: 0.0, 21: 1.0})
    run_folder(tmp_path, "grpo-seed0", 21, {0: 0.0, 10: 1.0})  # stopped at iteration 10
    out = tmp_path / "summary.json"
    not_run = ["--not-run", "marft:1", "machine time"]
    summarize.main([str(tmp_path), "--task", "support-desk-v2", "--out", str(out), *not_run])
    summary = json.loads(out.read_text())
    assert summary["settings"]["team_untuned"] == [0.0]
    assert summary["settings"]["team_marft"] == [1.0]
    assert summary["settings"]["team_grpo_branched"] == [None]  # not counted as a result
    assert summary["jobs"]["grpo"]["0"]["status"] == "stopped after iteration 10"
    assert summary["jobs"]["untuned"]["0"]["status"] == "evaluation only"
    assert summary["not_run"] == {"marft:1": "machine time"}
