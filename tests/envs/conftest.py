"""Fixtures of the env tests: a namespaced sandbox per module (code, sandbox and tool tests), the
private uids its runs get; a fresh validation record per test."""

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


@pytest.fixture
def run_uids(sandbox, monkeypatch):
    """The private uids the sandbox hands to this test's runs (as root; empty otherwise)."""
    issued: set[int] = set()
    draw = sandbox._private_uid

    def record():
        uid = draw()
        if uid is not None:
            issued.add(uid)
        return uid

    monkeypatch.setattr(sandbox, "_private_uid", record)
    return issued


@pytest.fixture(autouse=True)
def _fresh_validation_record(tmp_path, monkeypatch):
    monkeypatch.setenv("MARFT_CACHE", str(tmp_path / "marft-cache"))
    from marft_envs.code.validation_cache import reference_verdicts as _reference_verdicts

    _reference_verdicts.cache_clear()
    yield
    _reference_verdicts.cache_clear()
