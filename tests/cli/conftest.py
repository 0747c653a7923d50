"""Fixtures for the command-line tests: the tiny model, tiny budgets, a user's own env package."""

from __future__ import annotations

import textwrap

import pytest

#: A user's env module: registers triage-v0 (no dataset argument) with a stateful dependency function.
CUSTOM_ENV = textwrap.dedent(
    '''
    from marft_envs import AgentProfile, DependencyFunction, FlexPOMDPEnv, Transition, Turn, register


    class Tally(DependencyFunction):
        """Chain that remembers how many turns it scheduled since its last reset (per-env state)."""

        def __init__(self):
            self.scheduled = 0

        def reset(self, agents):
            self.scheduled = 0

        def next_turn(self, state):
            if len(state.actions) == len(state.agents):
                return None
            self.scheduled += 1
            return Turn(state.agents[len(state.actions)], sees=state.acted)


    class TriageEnv(FlexPOMDPEnv):
        def __init__(self, dependency=None, **kwargs):
            profiles = [AgentProfile("triager", "Name the digit."), AgentProfile("solver", "Answer.", graded=True)]
            super().__init__(profiles, dependency, **kwargs)

        def _reset_task(self, options):
            self.target = int(self.np_random.integers(0, 10))

        def _observation(self, agent):
            return f"Number {self.target}."

        def _transition(self, actions):
            ok = str(self.target) in actions["solver"]
            return Transition(reward=float(ok), terminated=True, info={"correct": ok})


    register("triage-v0", TriageEnv, kwargs={"dependency": Tally()}, description="A user's team.")
    '''
)


@pytest.fixture(autouse=True)
def _run_in_tmp(tmp_path, monkeypatch):
    """Commands write default run folders (runs/...) under the working directory: keep it scratch."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def tiny_path():
    from marft_algos.policy import tiny_model_path

    return str(tiny_model_path())


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """A importable package ``user_envs`` with module ``user_envs.triage`` (on sys.path)."""
    root = tmp_path / "site"
    (root / "user_envs").mkdir(parents=True)
    (root / "user_envs" / "__init__.py").write_text("")
    (root / "user_envs" / "triage.py").write_text(CUSTOM_ENV)
    monkeypatch.syspath_prepend(str(root))
    yield root
    # Leave the registry and the module cache as they were for the registry-wide tests.
    import sys

    import marft_envs

    marft_envs.registry.pop("triage-v0", None)
    for name in [m for m in sys.modules if m == "user_envs" or m.startswith("user_envs.")]:
        del sys.modules[name]
