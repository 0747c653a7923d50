"""Per-agent training metrics (``train/<name>/<agent>``, ``rollout/<name>/<agent>``): on a
scripted three-agent team where only one agent's reward moves, only that agent's metrics move."""

from __future__ import annotations

import importlib.util
import json

import pytest
from test_trainers import SMALL

from marft_algos.policy import AgentSpec, MultiAgentPolicy
from marft_algos.runs.metrics import is_documented
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
from marft_envs import AgentProfile, FlexPOMDPEnv, Transition


class OneMoverEnv(FlexPOMDPEnv):
    """Planner and checker are always paid 0.5; the writer is paid its text's share of letters
    (which differs between samples, so only its group advantages are non-zero)."""

    def __init__(self) -> None:
        profiles = [AgentProfile(a, f"You are the {a}.") for a in ("planner", "checker", "writer")]
        super().__init__(profiles)

    def _reset_task(self, options):
        self.target = int(self.np_random.integers(10, 99))

    def _observation(self, agent):
        return f"Number {self.target}."

    def _transition(self, actions):
        text = actions["writer"]
        score = sum(ch.isascii() and ch.isalpha() for ch in text) / max(1, len(text))
        return Transition(
            reward={"planner": 0.5, "checker": 0.5, "writer": score},
            terminated=True,
            info={"correct": score > 0.5, "letters": round(score * len(text))},
        )


@pytest.fixture(scope="module")
def run(tiny_path, tmp_path_factory):
    agents = ["planner", "checker", "writer"]
    # Planner and checker share one adapter: its gradient norm is reported once, as planner+checker.
    specs = {"planner": AgentSpec(adapter="shared"), "checker": AgentSpec(adapter="shared")}
    policy = MultiAgentPolicy.from_pretrained(tiny_path, agents, specs=specs, seed=0)
    out = tmp_path_factory.mktemp("one_mover")
    settings = {**SMALL, "output_dir": str(out), "num_generations": 2, "reward_source": "agent"}
    settings["skip_zero_advantages"] = False  # every agent runs forward: its statistics exist
    settings["tensorboard"] = importlib.util.find_spec("tensorboard") is not None
    settings.pop("critic_learning_rate")
    trainer = GRPOTrainer(policy, OneMoverEnv, GRPOConfig(**settings), eval_env_fn=OneMoverEnv)
    trainer.train()
    trainer.close()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return rows, out


def test_only_the_agent_whose_reward_moves_has_moving_metrics(run):
    records, _ = run
    trained = [r for r in records if "train/policy_loss" in r]
    assert len(trained) == 2
    for r in trained:
        for agent in ("planner", "checker"):
            assert r[f"rollout/reward_mean/{agent}"] == 0.5
            assert r[f"train/advantage_abs_mean/{agent}"] == 0.0
            assert r[f"train/advantage_mean/{agent}"] == 0.0
            assert r[f"train/policy_loss/{agent}"] == 0.0
        assert r["train/grad_norm/checker+planner"] == 0.0  # the shared adapter, once
        assert "train/grad_norm/planner" not in r and "train/grad_norm/checker" not in r
        assert r["train/advantage_abs_mean/writer"] > 0.0
        assert r["train/grad_norm/writer"] > 0.0
        assert r["train/entropy/writer"] > 0.0 and r["train/entropy/planner"] > 0.0
        for name in ("approx_kl", "clip_fraction"):
            assert {f"train/{name}/{a}" for a in ("planner", "checker", "writer")} <= set(r)
    writer = [r["rollout/reward_mean/writer"] for r in trained]
    assert writer[0] != writer[1]  # the writer's reward moves between iterations


def test_per_agent_rollout_and_eval_metrics_without_graded(run):
    records, _ = run
    # No agent is graded (no info["graded"]): message length, cut share and calls still per agent.
    final = records[-1]
    for prefix in ("rollout", "eval"):
        r = next(r for r in reversed(records) if f"{prefix}/accuracy" in r)
        for agent in ("planner", "checker", "writer"):
            assert r[f"{prefix}/calls/{agent}"] == 1.0
            assert 0 < r[f"{prefix}/action_tokens_mean/{agent}"] <= SMALL["max_new_tokens"]
            assert 0.0 <= r[f"{prefix}/action_cut_fraction/{agent}"] <= 1.0
            assert f"{prefix}/accuracy/{agent}" not in r
        assert f"{prefix}/info/letters" in r  # the env's own counter, per episode
    assert all(is_documented(k) for r in records for k in r), final


def test_the_same_names_are_tensorboard_scalars(run):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records, folder = run
    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    for name in ("train/grad_norm/writer", "rollout/reward_mean/writer", "eval/calls/planner"):
        assert name in scalars
    logged = [(e.step, e.value) for e in events.Scalars("train/grad_norm/writer")]
    assert logged == [
        (r["iteration"], pytest.approx(r["train/grad_norm/writer"]))
        for r in records
        if "train/grad_norm/writer" in r
    ]
