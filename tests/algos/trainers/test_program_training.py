"""Agent programs under the trainers: the same token ids as the native env, exact first updates,
and a rollout that stops when too many programs fail."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from test_trainers import SMALL

import marft_envs
from marft_algos import (
    ActionMARFTConfig,
    ActionMARFTTrainer,
    Critic,
    GRPOConfig,
    GRPOTrainer,
    MultiAgentPolicy,
)
from marft_algos.rollout.collector import (
    EpisodeRequest,
    GenerationSettings,
    ProgramFailures,
    RolloutCollector,
)
from marft_algos.runs.metrics import is_documented
from marft_envs.programs import ProgramEnv

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def example():
    """examples/program_team.py, imported (it registers helpdesk-v0 and program-math-dual-v0)."""
    spec = importlib.util.spec_from_file_location(
        "program_team", ROOT / "examples" / "program_team.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _collect(policy, env_id, n, settings, **kwargs):
    collector = RolloutCollector.from_factory(
        policy, lambda: marft_envs.make(env_id, **kwargs), 2, settings, seed=0
    )
    requests = [EpisodeRequest(seed=i, options={"index": i}) for i in range(n)]
    return collector.collect(requests)


@pytest.mark.parametrize("do_sample", [False, True])
def test_the_program_and_the_native_env_give_identical_token_ids(example, tiny_path, do_sample):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["reasoner", "actor"], seed=0)
    settings = GenerationSettings(max_new_tokens=8, do_sample=do_sample)
    native = _collect(policy, "math-dual-v7", 6, settings)
    program = _collect(policy, "program-math-dual-v0", 6, settings, split="train")
    for a, b in zip(native, program, strict=True):
        assert [d.agent for d in a.decisions] == [d.agent for d in b.decisions]
        for x, y in zip(a.decisions, b.decisions, strict=True):
            assert x.prompt_ids == y.prompt_ids
            assert x.action_ids == y.action_ids
            assert x.messages == y.messages
        assert a.team_return == b.team_return


def terse_team(task, client):
    """Planner -> specialist; rewarded for answers of even length (a reward that varies from the start)."""
    route = client.chat.completions.create(
        model="planner", messages=[{"role": "user", "content": f"Route: {task}"}]
    )
    specialist = "math" if "1" in (route.choices[0].message.content or "") else "writer"
    answer = client.chat.completions.create(
        model=specialist, messages=[{"role": "user", "content": f"Answer: {task}"}]
    )
    text = answer.choices[0].message.content or ""
    return {"success": float(len(text) % 2 == 0), "cost": -0.01 * sum(client.counts.calls.values())}


@pytest.mark.parametrize("algo", ["action-marft", "grpo"])
def test_a_program_team_trains_with_exact_first_updates(tiny_path, algo):
    agents = ["planner", "math", "writer"]
    policy = MultiAgentPolicy.from_pretrained(tiny_path, agents, seed=0)
    small = {**SMALL, "iterations": 1, "episodes_per_iteration": 8, "max_new_tokens": 8}
    del small["critic_learning_rate"]
    tasks = [f"{a} + {b}" for a in range(10) for b in range(10)]
    env_fn = lambda: ProgramEnv(terse_team, agents, tasks)  # noqa: E731
    eval_fn = lambda: ProgramEnv(terse_team, agents, tasks, split="test")  # noqa: E731
    if algo == "grpo":
        config = GRPOConfig(num_generations=4, **small)
        trainer = GRPOTrainer(policy, env_fn, config, eval_env_fn=eval_fn)
    else:
        config = ActionMARFTConfig(critic_learning_rate=SMALL["critic_learning_rate"], **small)
        trainer = ActionMARFTTrainer(
            policy, env_fn, config, critic=Critic(policy, seed=0), eval_env_fn=eval_fn
        )
    before = [p.detach().clone() for a in agents for p in policy.trainable_parameters(a)]
    last = trainer.train()[-1]
    after = [p.detach() for a in agents for p in policy.trainable_parameters(a)]
    assert any(not (x == y).all() for x, y in zip(before, after, strict=True))
    assert math.isfinite(last["train/policy_loss"])
    assert abs(last["train/approx_kl"]) < 1e-3
    assert last["rollout/calls/planner"] == 1.0  # every request is routed once
    assert last["rollout/reward/cost"] == pytest.approx(-0.02)
    assert 0 <= last["rollout/reward/success"] <= 1
    assert last["rollout/program_errors"] == 0
    undocumented = [name for name in last if name != "iteration" and not is_documented(name)]
    assert undocumented == []


def test_the_help_desk_example_trains(example, tiny_path):
    policy = MultiAgentPolicy.from_pretrained(
        tiny_path, ["planner", "math", "writer", "critic"], seed=0
    )
    config = ActionMARFTConfig(**{**SMALL, "iterations": 1, "episodes_per_iteration": 2})
    trainer = ActionMARFTTrainer(
        policy,
        lambda: marft_envs.make("helpdesk-v0"),
        config,
        critic=Critic(policy, seed=0),
        eval_env_fn=lambda: marft_envs.make("helpdesk-v0", split="test"),
    )
    last = trainer.train()[-1]
    assert math.isfinite(last["train/policy_loss"])
    assert last["rollout/calls/planner"] == 1.0
    assert "eval/reward/success" in last


def test_too_many_failed_programs_stop_the_rollout_with_the_first_traceback(tiny_path):
    def fails(task, client):
        client.chat.completions.create(model="solo", messages=[{"role": "user", "content": "hi"}])
        raise KeyError("no such field")

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["solo"], seed=0)
    collector = RolloutCollector.from_factory(
        policy,
        lambda: ProgramEnv(fails, ["solo"], list(range(10)), max_error_share=0.5),
        2,
        GenerationSettings(max_new_tokens=4),
        seed=0,
    )
    with pytest.raises(ProgramFailures, match="no such field") as caught:
        collector.collect(4)
    assert "4 of 4 episodes" in str(caught.value) and "Traceback" in str(caught.value)


def test_failures_within_the_share_are_episodes_with_the_error_reward(tiny_path):
    def sometimes(task, client):
        client.chat.completions.create(model="solo", messages=[{"role": "user", "content": "hi"}])
        if task == 0:
            raise ValueError("bad task")
        return 1.0

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["solo"], seed=0)
    collector = RolloutCollector.from_factory(
        policy,
        lambda: ProgramEnv(
            sometimes, ["solo"], [0, 1, 1, 1], test_tasks=[0, 1, 1, 1], error_reward=-0.5
        ),
        2,
        GenerationSettings(max_new_tokens=4),
        seed=0,
    )
    episodes = collector.collect([EpisodeRequest(seed=i, options={"index": i}) for i in range(4)])
    assert [e.team_return for e in episodes] == [-0.5, 1.0, 1.0, 1.0]
    assert episodes[0].info["program_error"]["message"] == "bad task"
    assert [len(e.decisions) for e in episodes] == [1, 1, 1, 1]


def test_a_program_without_calls_gives_an_episode_without_decisions(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["solo"], seed=0)
    collector = RolloutCollector.from_factory(
        policy,
        lambda: ProgramEnv(lambda task, client: 1.0, ["solo"], [1, 2, 3]),
        2,
        GenerationSettings(max_new_tokens=4),
        seed=0,
    )
    episodes = collector.collect(3)
    assert [len(e.decisions) for e in episodes] == [0, 0, 0]
    assert all(e.info["no_calls"] for e in episodes)


LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}


def tool_team(task, client):
    """One agent with a tool; rewarded for replies of even length (varies from the start)."""
    messages = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": task}]
    reply = client.chat.completions.create(model="solver", messages=messages, tools=[LOOKUP])
    message = reply.choices[0].message
    if message.tool_calls:  # the tool loop, as OpenAI code writes it
        messages.append(message)
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "found"})
        message = (
            client.chat.completions.create(model="solver", messages=messages, tools=[LOOKUP])
            .choices[0]
            .message
        )
    return float(len(message.content or "") % 2 == 0)


@pytest.mark.parametrize("tool_prompt", [None, "hermes"])
def test_a_program_with_tools_trains_on_the_ids_it_rendered(tiny_path, tool_prompt):
    """Tools through the chat template (a template with tool support), or described in text for
    the built-in template: the prompt ids are the rendered observation, the first update exact."""
    from trainer_envs import TOOL_TEMPLATE

    from marft_algos.policy.rendering import render_prompt_ids

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["solver"], seed=0)
    tokenizer = policy.tokenizer("solver")
    if tool_prompt is None:
        tokenizer.chat_template = TOOL_TEMPLATE
    tasks = [f"word {i}" for i in range(40)]
    env_fn = lambda: ProgramEnv(tool_team, ["solver"], tasks, tool_prompt=tool_prompt)  # noqa: E731
    small = {**SMALL, "iterations": 1, "episodes_per_iteration": 8, "max_new_tokens": 8}
    del small["critic_learning_rate"]
    trainer = GRPOTrainer(policy, env_fn, GRPOConfig(num_generations=4, **small))
    seen = []
    collect = trainer.collector.collect

    def recording(requests):
        episodes = collect(requests)
        seen.extend(episodes)
        return episodes

    trainer.collector.collect = recording
    last = trainer.train()[-1]
    assert math.isfinite(last["train/policy_loss"])
    assert abs(last["train/approx_kl"]) < 1e-3
    decisions = [d for e in seen for d in e.decisions]
    assert decisions
    for d in decisions:
        observation = {"messages": d.messages, "tools": d.tools}
        assert d.prompt_ids == render_prompt_ids(tokenizer, observation)
        prompt = tokenizer.decode(d.prompt_ids)
        assert '"name": "lookup"' in prompt
        assert (d.tools == [LOOKUP]) == (tool_prompt is None)
        assert ("<tools>" in prompt) == (tool_prompt == "hermes")


def _sometimes_fails(task, client):
    reply = client.chat.completions.create(
        model="solo", messages=[{"role": "user", "content": f"task {task}"}]
    )
    text = reply.choices[0].message.content or ""
    if len(text) % 3 == 0:  # sampled replies differ within a group: some episodes fail
        raise ValueError("bad task")
    return {"success": float(len(text) % 2 == 0), "cost": -0.5}


@pytest.mark.parametrize("on_error", ["drop", "reward"])
def test_failed_episodes_are_left_out_of_the_update_and_told_on_the_console(
    tiny_path, tmp_path, caplog, on_error
):
    """The default drops them (a crash paid 0 would beat finishing at -0.5 here); one console
    line per iteration counts them by kind and names their transcripts."""
    import json
    import logging

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["solo"], seed=0)

    def env_fn():
        return ProgramEnv(
            _sometimes_fails,
            ["solo"],
            [0, 1, 2, 3],
            test_tasks=[9],
            on_error=on_error,
            max_error_share=1.0,
        )

    small = {**SMALL, "iterations": 1, "episodes_per_iteration": 8, "max_new_tokens": 4}
    del small["critic_learning_rate"]
    config = GRPOConfig(num_generations=4, output_dir=str(tmp_path / "run"), **small)
    trainer = GRPOTrainer(policy, env_fn, config)
    trained_on = []
    update = trainer.update
    trainer.update = lambda episodes: trained_on.extend(episodes) or update(episodes)
    with caplog.at_level(logging.WARNING, logger="marft_algos.trainers.base"):
        (record,) = trainer.train()
    trainer.close()
    failed = record["rollout/program_errors"]
    assert failed > 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "program_errors.jsonl").open()]
    assert len(rows) == failed and rows[0]["info"]["program_error"]["message"] == "bad task"
    lines = [r.getMessage() for r in caplog.records if "episodes failed" in r.getMessage()]
    assert len(lines) == 1 and f"{failed} of 8 episodes failed (ValueError {failed})" in lines[0]
    assert "program_errors.jsonl" in lines[0]
    errors = [e for e in trained_on if "program_error" in e.info]
    if on_error == "drop":
        assert record["rollout/episodes_dropped"] == failed and not errors
        assert len(trained_on) == 8 - failed
    else:
        assert record["rollout/episodes_dropped"] == 0 and len(errors) == failed


def test_128_concurrent_http_episodes_on_the_built_in_model(tiny_path):
    """More episodes wait in a call at once than any worker-thread pool of the endpoint holds
    (anyio's is 40): all finish, with the tokens they would get in process."""
    pytest.importorskip("uvicorn", reason="the HTTP transport needs the agents extra")
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["planner", "math", "writer"], seed=0)
    settings = GenerationSettings(max_new_tokens=4)
    requests = [EpisodeRequest(seed=i, options={"index": i % 4}) for i in range(128)]
    runs = {}
    for transport in ("http", "inprocess"):
        collector = RolloutCollector.from_factory(
            policy,
            lambda transport=transport: ProgramEnv(
                terse_team,
                ["planner", "math", "writer"],
                [1, 2, 3, 4],
                split="all",
                transport=transport,
            ),
            128,
            settings,
            seed=0,
        )
        try:
            runs[transport] = collector.collect(requests)
        finally:
            collector.close()
    http, inprocess = runs["http"], runs["inprocess"]
    assert not [e.info["program_error"] for e in http if "program_error" in e.info]
    assert [len(e.decisions) for e in http] == [2] * 128
    assert [d.action_ids for e in http for d in e.decisions] == [
        d.action_ids for e in inprocess for d in e.decisions
    ]


def _always_fails(task, client):
    client.chat.completions.create(model="solo", messages=[{"role": "user", "content": "hi"}])
    raise ValueError("always")


# One trainer per update path: critic-free (GRPO; RLOO shares its update), REINFORCE++ (its own
# returns), and the actor-critic update at both levels (PPO shares it).
@pytest.mark.parametrize("kind", ["grpo", "reinforce-pp", "action", "token"])
def test_an_iteration_whose_episodes_all_failed_updates_nothing(tiny_path, kind):
    from test_trainers import CRITIC_FREE, adapter_params

    from marft_algos import TokenMARFTConfig, TokenMARFTTrainer

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["solo"], seed=0)
    settings = {**SMALL, "iterations": 1, "episodes_per_iteration": 4, "max_new_tokens": 4}

    def env_fn():
        return ProgramEnv(_always_fails, ["solo"], [1, 2], test_tasks=[3], max_error_share=1.0)

    if kind in CRITIC_FREE:
        settings.pop("critic_learning_rate")
        settings["num_generations"] = 1 if kind == "reinforce-pp" else 2
        config_cls, trainer_cls = CRITIC_FREE[kind]
        trainer = trainer_cls(policy, env_fn, config_cls(**settings))
    else:
        config_cls, trainer_cls = {
            "action": (ActionMARFTConfig, ActionMARFTTrainer),
            "token": (TokenMARFTConfig, TokenMARFTTrainer),
        }[kind]
        trainer = trainer_cls(policy, env_fn, config_cls(**settings), critic=Critic(policy, seed=0))
    before = adapter_params(trainer, "solo")
    (record,) = trainer.train()
    trainer.close()
    assert record["rollout/episodes_dropped"] == 4
    after = adapter_params(trainer, "solo")
    assert all(torch.equal(before[name], after[name]) for name in before)
