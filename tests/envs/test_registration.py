"""The registry: ids, lazy entry points, overrides, errors."""

from __future__ import annotations

import pytest

import marft_envs
from marft_envs import EntryPointError, UnknownEnvError
from marft_envs.toy.relay import RelayEnv


@pytest.fixture
def scratch_ids():
    """Remove ids a test registers, so tests do not leak into the registry-wide checks."""
    added: list[str] = []
    yield added
    for env_id in added:
        marft_envs.registry.pop(env_id, None)


def test_builtin_ids_are_versioned():
    for env_id, env_spec in marft_envs.registry.items():
        assert env_id == env_spec.id
        assert env_id.rsplit("-v", 1)[1].isdigit()


def test_unknown_id_names_the_closest_ids():
    with pytest.raises(UnknownEnvError, match=r"Did you mean \['relay-v0', 'relay-v1'\]"):
        marft_envs.make("relays-v0")


def test_unknown_version_lists_available_versions():
    with pytest.raises(UnknownEnvError, match=r"available versions: \['relay-v0', 'relay-v1'\]"):
        marft_envs.make("relay-v9")


def test_id_without_version_is_rejected():
    with pytest.raises(ValueError, match="version suffix"):
        marft_envs.register("noversion", RelayEnv)


@pytest.mark.parametrize(
    "entry_point",
    [RelayEnv, lambda **kw: RelayEnv(**kw), "marft_envs.toy.relay:RelayEnv"],
    ids=["class", "callable", "lazy-string"],
)
def test_register_accepts_class_callable_and_lazy_string(entry_point, scratch_ids):
    scratch_ids.append("test/relay-three-v0")
    marft_envs.register("test/relay-three-v0", entry_point, kwargs={"n_agents": 3})
    env = marft_envs.make("test/relay-three-v0")
    assert env.possible_agents == ["scout", "messenger_1", "reporter"]
    assert marft_envs.spec("test/relay-three-v0").name == "test/relay-three"
    assert marft_envs.spec("test/relay-three-v0").version == 0


def test_overrides_reach_the_env():
    env = marft_envs.make("relay-v0", n_agents=4, code_length=7, horizon=2)
    env.reset(seed=0)
    assert len(env.possible_agents) == 4
    assert len(env.unwrapped.code) == 7
    assert env.unwrapped.horizon == 2


def test_registering_twice_warns(scratch_ids):
    scratch_ids.append("test/dup-v0")
    marft_envs.register("test/dup-v0", RelayEnv)
    with pytest.warns(UserWarning, match="Overriding environment 'test/dup-v0'"):
        marft_envs.register("test/dup-v0", RelayEnv)


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("no_such_module_xyz:Env", "Cannot import module 'no_such_module_xyz'"),
        ("marft_envs.toy.relay:Nope", "has no attribute 'Nope'"),
        ("marft_envs.toy.relay", "must look like 'package.module:attr'"),
        (lambda **kw: object(), "not a PettingZoo AECEnv"),
    ],
)
def test_bad_entry_points_fail_loudly_at_make(entry_point, message, scratch_ids):
    scratch_ids.append("test/broken-v0")
    marft_envs.register("test/broken-v0", entry_point)  # registering is lazy and succeeds
    with pytest.raises(EntryPointError, match=message):
        marft_envs.make("test/broken-v0")


def test_bad_override_names_the_env():
    with pytest.raises(TypeError, match="Could not build 'relay-v0'"):
        marft_envs.make("relay-v0", no_such_argument=1)


def test_pprint_registry_lists_every_id(capsys):
    text = marft_envs.pprint_registry()
    assert capsys.readouterr().out.strip() == text.strip()
    for env_id in marft_envs.registry:
        assert env_id in text


def test_make_wraps_with_order_enforcement():
    env = marft_envs.make("relay-v0")
    with pytest.raises(AttributeError, match="before reset"):
        _ = env.agent_selection
    env.reset(seed=0)
    assert isinstance(env.unwrapped, RelayEnv)
