"""Fixtures of the code tests: a fresh validation record per test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_validation_record(tmp_path, monkeypatch):
    monkeypatch.setenv("MARFT_CACHE", str(tmp_path / "marft-cache"))
    from marft_envs.code.validation_cache import reference_verdicts as _reference_verdicts

    _reference_verdicts.cache_clear()
    yield
    _reference_verdicts.cache_clear()
