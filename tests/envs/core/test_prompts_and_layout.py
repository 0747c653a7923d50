"""Agents' system prompts replaced by name (the rest of each profile kept) and the message layout
that puts the prompt in the user message; both refuse what they cannot apply, naming it."""

from __future__ import annotations

import pytest

import marft_envs


def test_system_prompts_replace_named_agents_and_keep_the_rest():
    env = marft_envs.make("math-dual-v4", system_prompts={"actor": "Answer in \\boxed{}."})
    env.reset(seed=0)
    base = env.unwrapped
    assert base.profiles["actor"].system_prompt == "Answer in \\boxed{}."
    assert base.profiles["actor"].graded and not base.profiles["reasoner"].graded
    default = marft_envs.make("math-dual-v4").unwrapped.profiles["reasoner"].system_prompt
    assert base.profiles["reasoner"].system_prompt == default
    messages = env.observe("reasoner")["messages"]
    assert messages[0] == {"role": "system", "content": default}


def test_the_user_layout_opens_the_user_message_with_the_prompt():
    plain = marft_envs.make("planpath-single-v0")
    plain.reset(seed=3)
    system, user = plain.observe("navigator")["messages"]
    env = marft_envs.make(
        "planpath-single-v0", system_prompts={"navigator": "Go."}, message_layout="user"
    )
    env.reset(seed=3)
    assert env.observe("navigator")["messages"] == [
        {"role": "user", "content": "Go.\n\n" + user["content"]}
    ]
    assert system["role"] == "system"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"system_prompts": {"critic": "x"}}, r"agent\(s\) \['critic'\] that are not in the team"),
        ({"system_prompts": {"actor": 3}}, "must be a string"),
        ({"message_layout": "inline"}, r"message_layout must be one of \['system', 'user'\]"),
    ],
)
def test_bad_prompts_or_layouts_are_refused_by_name(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        marft_envs.make("math-dual-v4", **kwargs)
