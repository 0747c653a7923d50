"""The registry: ids, lazy entry points, overrides, errors."""

from __future__ import annotations

import sys
import warnings

import pytest
from pettingzoo.test import api_test

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
        marft_envs.registration.deprecated.pop(env_id, None)


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


def test_make_stamps_the_spec_with_the_merged_kwargs():
    env = marft_envs.make("relay-v1", n_agents=4)
    spec = env.unwrapped.spec
    assert spec.id == "relay-v1" and spec.kwargs == {"show_round": True, "n_agents": 4}
    assert spec.to_json() == {
        "id": "relay-v1",
        "entry_point": "marft_envs.toy.relay:RelayEnv",
        "kwargs": {"show_round": True, "n_agents": 4},
    }
    assert marft_envs.spec("relay-v1").kwargs == {"show_round": True}  # the registry is untouched


def test_every_copy_gets_its_own_dependency_function(scratch_ids):
    from marft_envs import Chain

    shared = Chain()
    scratch_ids.append("test/relay-router-v0")
    marft_envs.register("test/relay-router-v0", RelayEnv, kwargs={"dependency": shared})
    first, second = marft_envs.make("test/relay-router-v0"), marft_envs.make("test/relay-router-v0")
    assert first.unwrapped.dependency is not second.unwrapped.dependency
    assert shared not in (first.unwrapped.dependency, second.unwrapped.dependency)
    third = marft_envs.make("test/relay-router-v0", dependency=shared)  # an override is copied too
    assert third.unwrapped.dependency is not shared and isinstance(
        third.unwrapped.dependency, Chain
    )


def test_module_prefix_imports_the_registering_module(tmp_path, monkeypatch, scratch_ids):
    (tmp_path / "my_team_envs.py").write_text(
        "import marft_envs\n"
        "from marft_envs.toy.relay import RelayEnv\n"
        "marft_envs.register('my-team-v0', RelayEnv, kwargs={'n_agents': 2})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    scratch_ids.append("my-team-v0")
    env = marft_envs.make("my_team_envs:my-team-v0")
    assert env.possible_agents == RelayEnv(n_agents=2).possible_agents
    with pytest.raises(
        EntryPointError, match=r"Cannot import 'missing_mod' for env 'x-v0'.*importable module"
    ):
        marft_envs.make("missing_mod:x-v0")


def test_installed_plugins_register_through_the_entry_point_group(monkeypatch, scratch_ids):
    import importlib.metadata

    from marft_envs import registration

    def register_plugin_envs():
        marft_envs.register("plugin/relay-v0", RelayEnv, description="From a plugin.")

    calls = []

    class FakeEntryPoint:
        name, value = "demo", "demo_pkg:register"

        def load(self):
            calls.append(self.name)
            return register_plugin_envs

    def entry_points(group):
        return [FakeEntryPoint()] if group == registration.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registration, "_plugins_loaded", False)
    scratch_ids.append("plugin/relay-v0")
    assert marft_envs.make("plugin/relay-v0").unwrapped.spec.id == "plugin/relay-v0"
    marft_envs.make("plugin/relay-v0")
    assert calls == ["demo"]  # loaded once, on the first unknown id


@pytest.mark.parametrize("name", ["math-single", "math-dual", "math-trio", "math-dual-retry"])
@pytest.mark.parametrize("old", ["v0", "v1", "v2", "v3", "v4"])
def test_out_of_date_math_ids_still_make_with_a_warning_naming_v7_and_what_changed(name, old):
    # Gymnasium's convention: an old version makes, and warns with the newest one.
    with pytest.warns(
        marft_envs.OutdatedEnvWarning,
        match=rf"'{name}-{old}' is out of date: the newest version is '{name}-v7'.*"
        rf"What changed: its grader .*refused right answers.*2\^\{{10\}} for 1024.*"
        rf"refuses a computation only when it restates the problem.*"
        rf"refused right answers written in edge forms.*"
        rf"refused right answers written in more edge forms.*"
        rf"make\('{name}-{old}'\) now builds '{name}-v7'",
    ):
        env = marft_envs.make(f"{name}-{old}")
    assert env.unwrapped.spec == marft_envs.spec(f"{name}-v7")  # what was built, recorded as such
    assert marft_envs.spec(f"{name}-v7").kwargs["profiles"] in ("single", "dual", "trio")
    assert f"{name}-{old}" not in marft_envs.registry  # listed once, under its newest id


@pytest.mark.parametrize("old", ["v0", "v1", "v2", "v3"])
def test_ids_older_than_v4_also_name_v4s_fix(old):
    with pytest.warns(
        marft_envs.OutdatedEnvWarning,
        match=r"empty text block.*\\text\{\}6 \\times 8 - 9.*restates the problem",
    ):
        marft_envs.make(f"math-dual-{old}")


@pytest.mark.parametrize("old", ["v0", "v1", "v2"])
def test_ids_older_than_v3_also_name_v3s_fix(old):
    with pytest.warns(
        marft_envs.OutdatedEnvWarning, match=r"unevaluated computation.*6 \\times 8 - 9 for 39"
    ):
        marft_envs.make(f"math-dual-{old}")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("tool-math-single-v0", "tool-math-single-v7"),
        ("tool-math-single-v1", "tool-math-single-v7"),
        ("tool-math-single-v2", "tool-math-single-v7"),
        ("tool-math-dual-v0", "tool-math-dual-v7"),
        ("tool-math-dual-v1", "tool-math-dual-v7"),
        ("tool-math-dual-v2", "tool-math-dual-v7"),
        ("debate-v0", "debate-v7"),
        ("debate-v1", "debate-v7"),
        ("debate-v2", "debate-v7"),
        ("debate-v3", "debate-v7"),
    ],
)
def test_other_math_graded_ids_make_their_newest_version_with_the_grader_fix(old, new):
    with pytest.warns(
        marft_envs.OutdatedEnvWarning,
        match=rf"newest version is '{new}'.*empty text block.*text is judged by what it wraps"
        r".*restates the problem",
    ):
        env = marft_envs.make(old)
    assert env.unwrapped.spec == marft_envs.spec(new)


@pytest.mark.parametrize("old", ["tool-math-single-v4", "tool-math-dual-v4", "debate-v4"])
def test_the_v4_ids_of_tool_math_and_debate_name_the_fixes_of_v5_to_v7(old):
    new = old[:-1] + "7"
    with pytest.warns(
        marft_envs.OutdatedEnvWarning,
        match=rf"newest version is '{new}'.*3\\frac12 as 3/2.*restates the problem.*edge forms"
        r".*more edge forms",
    ):
        env = marft_envs.make(old)
    assert env.unwrapped.spec == marft_envs.spec(new)


_MATH_GRADED = [
    "math-single",
    "math-dual",
    "math-trio",
    "math-dual-retry",
    "tool-math-single",
    "tool-math-dual",
    "debate",
]


@pytest.mark.parametrize("name", _MATH_GRADED)
def test_the_v5_ids_make_v7_and_name_the_edge_forms_of_v6_and_v7(name):
    with pytest.warns(
        marft_envs.OutdatedEnvWarning,
        match=rf"newest version is '{name}-v7'.*edge forms: vulgar fractions \(½, 1½\).*1'000"
        r".*5 \(five\).*more edge forms.*1 000\.5.*twenty-one.*1 1/2.*Answer: 5",
    ):
        env = marft_envs.make(f"{name}-v5")
    assert env.unwrapped.spec == marft_envs.spec(f"{name}-v7")
    assert f"{name}-v5" not in marft_envs.registry


@pytest.mark.parametrize(
    ("old", "new"),
    [
        *((f"{name}-v6", f"{name}-v7") for name in _MATH_GRADED),
        ("choice-team-v0", "choice-team-v1"),
    ],
)
def test_the_v6_ids_and_choice_team_v0_make_the_grader_of_v7(old, new):
    with pytest.warns(
        marft_envs.OutdatedEnvWarning,
        match=rf"newest version is '{new}'.*more edge forms.*\(1 000\.5\).*\(twenty-one\)"
        r".*\(1 1/2\).*\(Answer: 5, Final answer: 42.*\(\*\*5\*\*\).*no wrong answer is paid",
    ):
        env = marft_envs.make(old)
    assert env.unwrapped.spec == marft_envs.spec(new)
    assert old not in marft_envs.registry


@pytest.mark.parametrize("old", ["v0", "v1", "v2", "v3"])
def test_tool_math_ids_name_the_sandbox_fix_of_v4(old):
    with pytest.warns(
        marft_envs.OutdatedEnvWarning,
        match=r"newest version is 'tool-math-dual-v7'.*killed by signal 9.*no host path",
    ):
        env = marft_envs.make(f"tool-math-dual-{old}")
    assert env.unwrapped.spec == marft_envs.spec("tool-math-dual-v7")


def test_the_design_cards_first_line_makes_an_env_that_passes_the_api_test():
    with pytest.warns(marft_envs.OutdatedEnvWarning):
        env = marft_envs.make("math-dual-v0")
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*(NumPy array|probably should be|recommend agents)"
        )
        api_test(env, num_cycles=20)


def test_a_user_can_deprecate_an_id_of_their_own(scratch_ids):
    scratch_ids += ["test/old-v0", "test/old-v1"]
    marft_envs.register("test/old-v1", "marft_envs.toy.relay:RelayEnv", kwargs={"n_agents": 3})
    marft_envs.deprecate("test/old-v0", "test/old-v1", "v1 has three agents.")
    with pytest.warns(marft_envs.OutdatedEnvWarning, match="What changed: v1 has three agents."):
        env = marft_envs.make("test/old-v0", horizon=2)
    assert len(env.possible_agents) == 3 and env.unwrapped.spec.id == "test/old-v1"
    with pytest.raises(ValueError, match="'test/none-v1' is not registered"):
        marft_envs.deprecate("test/old-v0", "test/none-v1", "nothing")


def test_module_prefix_finds_a_module_in_the_working_folder(tmp_path, monkeypatch, scratch_ids):
    # The marft script (unlike python -m and pytest) has no working folder on sys.path.
    (tmp_path / "cwd_team.py").write_text(
        "import marft_envs\n"
        "def team(task, client):\n"
        "    client.chat.completions.create(model='solo', messages=[{'role': 'user', 'content': task}])\n"
        "    return 1.0\n"
        "marft_envs.register_program('cwd-team-v0', team, agents=['solo'], tasks=['a', 'b', 'c'])\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    monkeypatch.delitem(sys.modules, "cwd_team", raising=False)
    scratch_ids.append("cwd-team-v0")
    env = marft_envs.make("cwd_team:cwd-team-v0", split="train")
    assert env.possible_agents == ["solo"]
    assert sys.path[-1] == str(tmp_path)
    # A module that is in no folder still names the fix.
    with pytest.raises(EntryPointError, match=r"Cannot import 'not_here' for env 'x-v0'"):
        marft_envs.make("not_here:x-v0")


def test_a_missing_import_inside_the_module_is_not_retried(tmp_path, monkeypatch):
    (tmp_path / "cwd_broken.py").write_text("import no_such_dependency_of_cwd_broken\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    with pytest.raises(EntryPointError, match="no_such_dependency_of_cwd_broken"):
        marft_envs.make("cwd_broken:x-v0")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": []}, r"tasks=\[\] of 'empty-team-v0' holds no tasks; pass a non-empty list"),
        ({"tasks": None}, r"tasks=None of 'empty-team-v0' is not a list of tasks"),
        (
            {"tasks": ["a"], "test_tasks": []},
            r"test_tasks=\[\] of 'empty-team-v0' holds no tasks.*leave test_tasks out",
        ),
        ({"tasks": "a b c"}, r"tasks='a b c' is not a file"),
        ({"tasks": ["a"], "test_tasks": lambda rng: "b"}, r"test_tasks of 'empty-team-v0' is a"),
    ],
)
def test_register_program_refuses_no_tasks_naming_the_argument(kwargs, message):
    with pytest.raises((ValueError, TypeError, FileNotFoundError), match=message):
        marft_envs.register_program(
            "empty-team-v0", lambda task, client: 1.0, agents=["solo"], **kwargs
        )
    assert "empty-team-v0" not in marft_envs.registry
