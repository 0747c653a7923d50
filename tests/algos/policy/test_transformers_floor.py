"""The transformers floor is the release the KV cache was written against (issue 40): pyproject
declares it, and an older transformers is refused in one line naming the fix."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from packaging.version import Version
from transformers.cache_utils import DynamicLayer

from marft_algos.policy.kv_cache import MIN_TRANSFORMERS, GrowingLayer, check_transformers

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def test_pyproject_declares_the_release_the_kv_cache_needs():
    floor = re.search(r'"transformers>=([0-9.]+)"', PYPROJECT.read_text())
    assert floor is not None
    assert Version(floor.group(1)) >= Version(MIN_TRANSFORMERS)


def test_the_growing_layer_overrides_the_installed_signatures():
    # What changed in 5.4 (from cache_position): a layer overriding the old name would get a tensor.
    for name in ("get_mask_sizes", "update", "batch_select_indices"):
        ours = list(inspect.signature(getattr(GrowingLayer, name)).parameters)
        theirs = list(inspect.signature(getattr(DynamicLayer, name)).parameters)
        assert ours[: len(theirs)] == theirs[: len(ours)], (name, ours, theirs)
    assert "query_length" in inspect.signature(DynamicLayer.get_mask_sizes).parameters


@pytest.mark.parametrize("old", ["4.45.0", "5.3.0"])
def test_an_older_transformers_is_refused_naming_the_fix(old):
    with pytest.raises(ImportError, match=rf"found {re.escape(old)}.*transformers>=5\.4"):
        check_transformers(old)
    check_transformers(MIN_TRANSFORMERS)
    check_transformers("5.23.0")
