"""Structured outputs (chat ``response_format``, Responses ``text.format``) on the training
endpoint: checked in the OpenAI shape, repeated in the Response, and not enforced; the Agents SDK's
default client with an ``output_type`` trains, and a reply that does not parse is its program's
error."""

from __future__ import annotations

import logging

import pytest

for _package in ("openai", "uvicorn", "starlette", "agents"):
    pytest.importorskip(_package, reason=f"the HTTP transport needs the agents extra ({_package})")

import openai  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from test_program_env import play  # noqa: E402

from marft_envs.programs import ProgramEnv  # noqa: E402
from marft_envs.wire import formats  # noqa: E402
from marft_envs.wire.checks import check_request  # noqa: E402
from marft_envs.wire.responses import response_object, responses_request  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
CHAT_FORMAT = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": SCHEMA}}
TEXT_FORMAT = {"type": "json_schema", "name": "verdict", "schema": SCHEMA, "strict": True}


@pytest.mark.parametrize(
    ("fmt", "where", "error"),
    [
        ({"type": "text"}, "response_format", None),
        ({"type": "json_object"}, "response_format", None),
        (CHAT_FORMAT, "response_format", None),
        (TEXT_FORMAT, "text.format", None),
        ({"type": "xml"}, "response_format", "must be {'type': one of"),
        ("json", "text.format", "must be {'type': one of"),
        ({"type": "json_schema", "json_schema": "verdict"}, "response_format", "'json_schema': {"),
        ({"type": "json_schema", "schema": ["answer"]}, "text.format", "'name': ..., 'schema'"),
    ],
)
def test_a_format_is_checked_in_the_openai_shape(fmt, where, error):
    if error is None:
        assert formats.check_output_format(fmt, where, "solver") == fmt
    else:
        with pytest.raises(TypeError, match=error):
            formats.check_output_format(fmt, where, "solver")


def test_a_structured_output_is_said_once_per_agent_not_to_be_enforced(caplog, monkeypatch):
    monkeypatch.setattr(formats, "_WARNED", set())
    messages = [{"role": "user", "content": "hi"}]
    with caplog.at_level(logging.WARNING, logger="marft_envs.wire.formats"):
        for agent in ("planner", "planner", "solver"):
            check_request(["planner", "solver"], agent, messages, {"response_format": CHAT_FORMAT})
        check_request(
            ["planner", "solver"], "solver", messages, {"response_format": {"type": "text"}}
        )
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("does not constrain decoding" in line for line in lines)
    assert "'planner'" in lines[0] and "'solver'" in lines[1]


def test_a_response_repeats_the_format_asked_for_as_openai_types_it():
    from openai.types.responses import Response

    from marft_envs.wire.protocol import Reply

    echo = responses_request({"model": "a", "input": "q", "text": {"format": TEXT_FORMAT}}).echo
    parsed = Response.model_validate(
        response_object("a", Reply('{"answer": "ok"}', True, 3, 4), echo)
    )
    assert parsed.text.format.type == "json_schema" and parsed.text.format.name == "verdict"
    plain = responses_request({"model": "a", "input": "q"}).echo
    assert Response.model_validate(response_object("a", None, plain)).text.format.type == "text"


class Verdict(BaseModel):
    answer: str


async def _sdk_program(task, client):
    """The Agents SDK in its default configuration (Responses API) with an ``output_type``."""
    from agents import Agent, RunConfig, Runner, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    api = AsyncOpenAI(base_url=str(client.base_url), api_key="marft", max_retries=0)
    config = RunConfig(model_provider=OpenAIProvider(openai_client=api))
    agent = Agent(name="solver", instructions="Answer.", model="solver", output_type=Verdict)
    result = await Runner.run(agent, task, run_config=config)
    chat = openai.OpenAI(base_url=str(client.base_url), api_key="marft", max_retries=0)
    try:
        chat.chat.completions.create(
            model="solver", messages=[{"role": "user", "content": "x"}], response_format="json"
        )
        refused = 0.0
    except openai.BadRequestError as err:
        refused = float("response_format must be" in err.body["message"])
    return {"success": float(result.final_output.answer == "ok"), "bad_format_400": refused}


@pytest.mark.parametrize(("reply", "parsed"), [('{"answer": "ok"}', True), ("ok", False)])
def test_the_agents_sdk_with_an_output_type_trains_and_an_unparsed_reply_is_a_program_error(
    reply, parsed
):
    env = ProgramEnv(_sdk_program, ["solver"], ["say ok"], transport="http")
    try:
        play(env, lambda agent, messages: reply)
    finally:
        env.close()
    info = env.history[-1].info
    if parsed:
        assert "program_error" not in info
        assert info["reward_parts"] == {"success": 1.0, "bad_format_400": 1.0}
    else:  # not enforced: the SDK could not parse the reply, so the program failed
        assert info["program_error"]["type"] == "ModelBehaviorError"
