"""Fixtures for the algorithm tests: the tiny model; the trainer tests' helpers importable from
every folder (``from test_trainers import build``, ``from trainer_envs import DigitsEnv``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "trainers"))


@pytest.fixture(scope="session")
def tiny_path():
    from marft_algos.policy import tiny_model_path

    return str(tiny_model_path())
