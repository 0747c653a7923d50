"""ProgramSettings: flat keywords in, one RequestLimits, errors that name the fix; and the names
that moved to marft_envs.wire still import from where they were."""

from __future__ import annotations

import pytest

import marft_envs
from marft_envs import wire
from marft_envs.programs import ProgramEnv, ProgramSettings, RequestLimits
from marft_envs.programs.tasks import Tasks, checked_tasks

AGENTS = ["solo"]


def returns_one(task, client):
    client.chat.completions.create(model="solo", messages=[{"role": "user", "content": task}])
    return 1.0


def test_flat_request_keywords_build_one_request_limits():
    env = ProgramEnv(returns_one, AGENTS, ["t"], max_messages=5, max_concurrent_calls=2)
    assert env.settings.limits == RequestLimits(max_messages=5, max_concurrent_calls=2)
    assert type(env.settings.limits) is wire.RequestLimits


def test_flat_request_keywords_override_a_given_limits():
    given = RequestLimits(max_request_bytes=100, max_messages=7)
    settings = ProgramSettings.from_keywords({"limits": given, "max_messages": 3})
    assert settings.limits == RequestLimits(max_request_bytes=100, max_messages=3)


def test_the_defaults_are_the_documented_ones():
    settings = ProgramSettings.from_keywords({"reward_weights": None})
    assert settings == ProgramSettings()
    assert (settings.max_calls, settings.on_error, settings.transport) == (32, "drop", "inprocess")
    assert settings.limits == RequestLimits(4 * 2**20, 1024, 16)


def test_an_unknown_setting_is_refused_with_the_nearest_name():
    with pytest.raises(TypeError, match=r"'max_call'.*did you mean 'max_calls'"):
        ProgramEnv(returns_one, AGENTS, ["t"], max_call=3)


def test_register_program_keeps_its_flat_keywords():
    marft_envs.register_program(
        "settings-flat-v0",
        returns_one,
        agents=AGENTS,
        tasks=["a", "b"],
        max_calls=4,
        max_messages=9,
        on_error="reward",
    )
    try:
        env = marft_envs.make("settings-flat-v0", max_concurrent_calls=3).unwrapped
        assert env.settings.max_calls == 4 and env.settings.on_error == "reward"
        assert env.settings.limits == RequestLimits(max_messages=9, max_concurrent_calls=3)
        with pytest.raises(TypeError, match=r"Could not build 'settings-flat-v0'.*max_cals"):
            marft_envs.make("settings-flat-v0", max_cals=2)
    finally:
        marft_envs.registry.pop("settings-flat-v0")


def test_env_and_registration_refuse_tasks_with_one_message():
    with pytest.raises(ValueError, match=r"^tasks=\[\] holds no tasks; pass a non-empty list"):
        Tasks.of_split([], None, "train", test_size=0.1, seed=0)
    with pytest.raises(ValueError, match=r"^tasks=\[\] of 'x-v0' holds no tasks; pass a non-empty"):
        checked_tasks([], "tasks", owner="x-v0")


def test_moved_names_import_from_their_old_places():
    from marft_envs.programs import client, server, tools

    assert client.RequestLimits is wire.RequestLimits
    assert client.RequestRefused is wire.RequestRefused
    assert client.ChatCompletion is wire.ChatCompletion
    assert tools.parse_hermes is wire.parse_hermes
    assert tools.ToolCall is wire.ToolCall
    assert server.error_response is wire.http.error_response
    assert server.allowed_host is wire.http.allowed_host
    from marft_envs.programs.env import split_tasks

    assert split_tasks(["a", "b"], ["c"], "test", test_size=0.5, seed=0) == ["c"]
