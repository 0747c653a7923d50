"""``marft serve`` in front of traffic: prompts bounded before generation (a 4 MiB request is
refused while another agent's call generates), agents served in turn however long one agent's
queue is, and a call dropped when its client disconnects."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest
from test_serving_app import ScriptedPolicy, _team

from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_algos.serving import BackgroundServer, Batcher, ServedTeam
from marft_envs.wire import TOOL_PARSERS, RequestLimits

#: The tiny model has 4096 positions: the writer may write 2000 tokens, the judge 4000.
BUDGETS = {"writer": 2000, "judge": 4000, "router": 8}


class Watched:
    """The tiny policy, telling when a generation starts and which agents it generated for."""

    def __init__(self, policy):
        self.policy = policy
        self.agents = policy.agents
        self.started = threading.Event()
        self.generated: list[str] = []
        self.lengths: list[int] = []  # tokens of each reply generated

    def render(self, agent, observation):
        return self.policy.render(agent, observation)

    def generate_from_ids(self, agent, prompt_ids, settings):
        self.started.set()
        self.generated.append(agent)
        out = self.policy.generate_from_ids(agent, prompt_ids, settings)
        self.lengths += [len(g.action_ids) for g in out]
        return out


@pytest.fixture(scope="module")
def tiny_team(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, list(BUDGETS))
    settings = GenerationSettings(
        max_new_tokens=8, do_sample=False, max_new_tokens_per_agent=BUDGETS
    )
    return lambda **kw: ServedTeam(Watched(policy), settings, TOOL_PARSERS["hermes"], **kw)


def _ask(url, agent, content, **fields):
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)
    return client.chat.completions.create(
        model=agent, messages=[{"role": "user", "content": content}], **fields
    )


def test_a_4_mib_request_is_refused_while_another_agent_generates(tiny_team):
    team = tiny_team()
    limit = RequestLimits(max_request_bytes=4 * 2**20)
    with BackgroundServer(team, limits=limit) as server:
        done: list[str] = []
        writer = threading.Thread(
            target=lambda: done.append(
                _ask(server.url, "writer", "a story").choices[0].finish_reason
            )
        )
        writer.start()
        try:
            assert team.policy.started.wait(60)  # the writer generates 2000 tokens
            with pytest.raises(openai.BadRequestError) as caught:
                _ask(server.url, "router", "word " * (4 * 2**20 // 5 - 100))  # ~1M tokens
            refused_while_writing = not done
        finally:
            writer.join(300)
    assert refused_while_writing  # the 400 came back while the other agent's call generated
    assert done == ["length"]  # and that call was answered in full
    assert caught.value.code == "context_length_exceeded"
    message = caught.value.body["message"]
    assert "has at least" in message and "more than the 4088 allowed" in message
    assert "context of 4096 tokens less the agent's reply budget of 8" in message
    assert team.policy.generated == ["writer"]  # the refused call was never generated


def test_max_prompt_tokens_and_the_reply_budget_bound_a_prompt_exactly(tiny_team):
    team = tiny_team(max_prompt_tokens=50)
    content = "two plus two " * 10
    tokens = len(team.policy.render("router", [{"role": "user", "content": content}]))
    assert tokens > 50
    with BackgroundServer(team) as server:
        with pytest.raises(openai.BadRequestError) as caught:
            _ask(server.url, "router", content)
        message = caught.value.body["message"]
        assert f"has {tokens} tokens, more than the 50 allowed (max_prompt_tokens=50)" in message
        assert "--max-prompt-tokens" in message
    team = tiny_team()
    content = "two plus two " * 3  # within 96 tokens, not within 96 less the judge's 4000
    with BackgroundServer(team) as server:
        with pytest.raises(openai.BadRequestError) as caught:
            _ask(server.url, "judge", content * 3)
        assert "reply budget of 4000" in caught.value.body["message"]
        assert "max_tokens" in caught.value.body["message"]
        # A shorter reply budget (max_tokens) makes room for the same prompt.
        reply = _ask(server.url, "judge", content * 3, max_tokens=4)
        assert reply.usage.completion_tokens <= 4
    assert team.policy.generated == ["judge"]


def test_one_agents_long_queue_waits_its_turn():
    gate, order = threading.Event(), []

    def generate(agent, observations, settings):
        if not order:
            gate.wait(30)  # the first batch holds the model while the queues fill
        order.append(agent)
        return [f"{agent} {o}" for o in observations]

    batcher = Batcher(generate, max_batch=8)
    try:
        first = batcher.submit("planner", 0, GenerationSettings())
        time.sleep(0.2)  # (ordering does not depend on it: the worker holds `first` or not)
        flood = [batcher.submit("planner", i, GenerationSettings()) for i in range(32)]
        other = batcher.submit("math", 0, GenerationSettings())
        gate.set()
        assert other.result(30) == "math 0"
        for future in [first, *flood]:
            future.result(30)
    finally:
        batcher.close()
    # The math call waited for the batch in progress and at most one planner batch, not four.
    assert order.index("math") <= 2, order
    assert order.count("math") == 1 and order.count("planner") >= 5  # 33 calls, batches of 8


def test_a_call_whose_client_disconnects_is_dropped_from_the_queue():
    gate = threading.Event()

    class Gated(ScriptedPolicy):
        def generate_from_ids(self, agent, prompt_ids, settings):
            if agent == "planner":
                gate.wait(30)
            return super().generate_from_ids(agent, prompt_ids, settings)

    policy = Gated()
    with BackgroundServer(_team(policy)) as server:
        holder = threading.Thread(target=lambda: _ask(server.url, "planner", "hold the model"))
        holder.start()
        try:
            deadline = time.monotonic() + 30
            while not server.batcher.generating() and time.monotonic() < deadline:
                time.sleep(0.01)
            with pytest.raises(httpx.ReadTimeout):  # the client gives up and hangs up
                httpx.post(
                    f"{server.url}/chat/completions",
                    json={"model": "math", "messages": [{"role": "user", "content": "1 + 1?"}]},
                    timeout=1.0,
                )
            while server.batcher.waiting() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.batcher.waiting() == 0
        finally:
            gate.set()
            holder.join(30)
    assert [agent for agent, _, _ in policy.batches] == ["planner"]  # math never generated


def test_a_generation_whose_caller_disconnects_stops(tiny_team):
    team = tiny_team()
    body = {"model": "writer", "messages": [{"role": "user", "content": "a story"}]}
    with BackgroundServer(team) as server:
        with pytest.raises(httpx.ReadTimeout):  # 2000 tokens take far longer than 2 s
            httpx.post(f"{server.url}/chat/completions", json=body, timeout=2.0)
        deadline = time.monotonic() + 120
        while (server.batcher.generating() or server.batcher.waiting()) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert not server.batcher.generating()
    assert team.policy.lengths and all(n < BUDGETS["writer"] for n in team.policy.lengths)
