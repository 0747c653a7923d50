"""Train and test puzzles are disjoint by construction, whatever the seeds."""

from __future__ import annotations

import pytest

import marft_envs
from marft_envs.core.splits import check_split, draw_in_split, in_test_split


@pytest.mark.parametrize("env_id", ["sudoku-single-v1", "planpath-dual-v1"])
def test_train_and_test_splits_never_share_a_puzzle(env_id):
    keys = {}
    for split in ("train", "test"):
        env = marft_envs.make(env_id, split=split)
        keys[split] = set()
        for seed in range(120):
            env.reset(seed=seed)
            keys[split].add(env.unwrapped.puzzle.key)
        assert all(in_test_split(k) == (split == "test") for k in keys[split])
    assert len(keys["train"]) > 100 and len(keys["test"]) > 100
    assert not keys["train"] & keys["test"]


def test_about_one_key_in_ten_is_held_out_and_bad_splits_are_named():
    held_out = sum(in_test_split(f"puzzle {i}") for i in range(5000))
    assert 400 < held_out < 600
    with pytest.raises(ValueError, match=r"not 'valid'.*split='test' for held-out"):
        check_split("valid", "sudoku")


def test_a_generator_with_no_instance_of_the_split_fails_clearly():
    import numpy as np

    key = next(f"k{i}" for i in range(100) if not in_test_split(f"k{i}"))  # a train-only key
    with pytest.raises(RuntimeError, match="No 'test' instance in 50 draws"):
        draw_in_split(lambda rng: key, str, "test", np.random.default_rng(0), max_draws=50)
