"""Tiny local models shared by the policy tests (built once per session, no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marft_algos.policy.tiny import build_tiny_model


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny Qwen2 (hidden 64, 2 layers, byte-level BPE with 384 tokens)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_a"), seed=0)


@pytest.fixture(scope="session")
def tiny_path_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A different tiny Qwen2: other width, depth, vocabulary size and tokenizer corpus."""
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny_b"),
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        vocab_size=300,
        seed=1,
        corpus=["only a few words here 0 1 2 3 4 5 6 7 8 9", "\\boxed{42} is the answer"],
    )
