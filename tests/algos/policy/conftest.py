"""The tiny local model of the policy tests (built once per session, no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marft_algos.policy.tiny import build_tiny_model


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny Qwen2 (hidden 64, 2 layers, byte-level BPE with 384 tokens)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_a"), seed=0)
