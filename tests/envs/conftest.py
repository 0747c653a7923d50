"""Fixtures of the env tests: a namespaced sandbox per module (code, sandbox and tool tests); a
fresh validation record per test."""

from __future__ import annotations

import pytest

from marft_envs.sandbox.runner import Sandbox, namespaces_available


@pytest.fixture(scope="module")
def sandbox(request):
    """A namespaced sandbox with the test module's ``LIMITS`` (skips where unshare is refused)."""
    if not namespaces_available():
        pytest.skip("unshare may not create namespaces here")
    box = Sandbox(request.module.LIMITS, isolation="namespaces", max_workers=2)
    yield box
    box.close()


@pytest.fixture(autouse=True)
def _fresh_validation_record(tmp_path, monkeypatch):
    monkeypatch.setenv("MARFT_CACHE", str(tmp_path / "marft-cache"))
    from marft_envs.code.validation_cache import reference_verdicts as _reference_verdicts

    _reference_verdicts.cache_clear()
    yield
    _reference_verdicts.cache_clear()
