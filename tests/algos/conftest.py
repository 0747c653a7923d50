"""Fixtures for the algorithm tests: the tiny model and a second, different one (``tiny_path_b``); the trainer tests' helpers importable from
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


@pytest.fixture(scope="session")
def tiny_path_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A different tiny Qwen2: other width, depth, vocabulary size and tokenizer corpus."""
    from marft_algos.policy.tiny import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("tiny_b"),
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        vocab_size=300,
        seed=1,
        corpus=["only a few words here 0 1 2 3 4 5 6 7 8 9", "\\boxed{42} is the answer"],
    )
