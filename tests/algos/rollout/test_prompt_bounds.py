"""Agent programs' prompts are bounded before anything is generated: a call whose rendered prompt
passes ``max_prompt_tokens``, or the model's context less the agent's reply budget, is refused
(HTTP 400 over the endpoint, :class:`~marft_envs.wire.RequestRefused` in process), its episode
is a counted ``PromptTooLong`` program error, and the policy never generates for it."""

from __future__ import annotations

import pytest

from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.collector import RolloutCollector
from marft_envs.programs import ProgramEnv

AGENTS = ["planner", "solver"]
SETTINGS = GenerationSettings(
    max_new_tokens=8, do_sample=False, max_new_tokens_per_agent={"solver": 4000}
)


class Recording:
    """The tiny policy, recording the prompt lengths it generates for."""

    def __init__(self, policy):
        self.policy = policy
        self.generated: list[tuple[str, int]] = []

    def generate(self, agent, messages_batch, settings, *, generator=None):
        out = self.policy.generate(agent, messages_batch, settings, generator=generator)
        self.generated += [(agent, len(g.prompt_ids)) for g in out]
        return out


@pytest.fixture(scope="module")
def policy(tiny_path):
    return MultiAgentPolicy.from_pretrained(tiny_path, AGENTS)


def _program(words: int, agent: str = "planner", seen: list | None = None):
    def program(task, client):
        try:
            reply = client.chat.completions.create(
                model=agent, messages=[{"role": "user", "content": "two plus two " * words}]
            )
        except Exception as err:  # the refusal reaches the program, as openai raises it
            if seen is not None:
                seen.append(getattr(err, "status_code", None) or type(err).__name__)
                seen.append(getattr(err, "code", None))
            raise
        return float(bool(reply.choices[0].message.content))

    return program


def _collect(policy, program, **env_kwargs):
    recording = Recording(policy)
    env = ProgramEnv(program, AGENTS, ["t"], **env_kwargs)
    collector = RolloutCollector(recording, [env], SETTINGS)
    try:
        (episode,) = collector.collect(1)
    finally:
        collector.close()
    return episode, recording.generated


@pytest.mark.parametrize(
    ("transport", "isolation"),
    [("inprocess", "thread"), ("http", "thread"), ("inprocess", "process")],
)
def test_a_prompt_over_max_prompt_tokens_is_refused_before_generation(policy, transport, isolation):
    seen: list = []
    episode, generated = _collect(
        policy,
        _program(40, seen=seen),
        transport=transport,
        isolation=isolation,
        max_prompt_tokens=50,
        max_error_share=1.0,
    )
    error = episode.info["program_error"]
    assert error["type"] == "PromptTooLong"
    assert generated == []  # never generated, never paid
    assert episode.info.get("drop") is True
    assert (
        "max_prompt_tokens=50" in error["message"]
        and "more than the 50 allowed" in error["message"]
    )
    tokens = len(policy.render("planner", [{"role": "user", "content": "two plus two " * 40}]))
    assert f"has {tokens} tokens" in error["message"]
    if transport == "http":
        assert seen == [400, "context_length_exceeded"]


@pytest.mark.parametrize("transport", ["inprocess", "http"])
def test_the_context_less_the_reply_budget_is_the_default_bound(policy, transport):
    # The tiny model has 4096 positions; the solver may write 4000 tokens: 96 are left.
    seen: list = []
    episode, generated = _collect(
        policy, _program(40, agent="solver", seen=seen), transport=transport, max_error_share=1.0
    )
    error = episode.info["program_error"]
    assert error["type"] == "PromptTooLong" and generated == []
    assert "more than the 96 allowed" in error["message"]
    assert "context of 4096 tokens less the agent's reply budget of 4000" in error["message"]
    # The planner's budget of 8 leaves room for the same prompt: it is generated.
    episode, generated = _collect(policy, _program(40), transport=transport)
    assert "program_error" not in episode.info and [a for a, _ in generated] == ["planner"]


def test_a_prompt_within_the_bounds_is_generated_as_before(policy):
    episode, generated = _collect(policy, _program(5), max_prompt_tokens=100)
    assert "program_error" not in episode.info
    assert generated == [("planner", generated[0][1])] and generated[0][1] <= 100


@pytest.mark.parametrize("transport", ["inprocess", "http"])
def test_a_call_just_under_the_body_bound_is_refused_by_its_characters(policy, transport):
    seen: list = []
    words = (4 * 2**20 - 4096) // len("two plus two ")  # about 3.9 MiB of text
    episode, generated = _collect(
        policy, _program(words, seen=seen), transport=transport, max_error_share=1.0
    )
    error = episode.info["program_error"]
    assert error["type"] == "PromptTooLong" and generated == []
    assert "has at least" in error["message"] and "more than the 4088 allowed" in error["message"]
