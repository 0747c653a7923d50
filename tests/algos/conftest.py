"""Fixtures for the algorithm tests: the tiny model."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_path():
    from marft_algos.policy import tiny_model_path

    return str(tiny_model_path())
