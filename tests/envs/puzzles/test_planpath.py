"""The Plan-Path grader on a hand-drawn map, the generator, and the planpath envs."""

from __future__ import annotations

import numpy as np
import pytest

import marft_envs
from marft_envs.puzzles.planpath import (
    extract_moves,
    format_map,
    generate_map,
    grade_path,
    parse_map,
    shortest_path,
    simulate,
)

# S at (0, 0), G at (2, 3); walls at (0, 2), (1, 1), (1, 2): the only way is down, then right.
MAP = parse_map(
    """
    S . # .
    . # # .
    . . . G
    """
)


@pytest.mark.parametrize(
    ("text", "correct", "failure"),
    [
        ("Path: D D R R R", True, None),  # the shortest: 5 moves
        ("Go down twice then right.\nPath: DDRRR", True, None),
        ("path: down, down, right, right, right.", True, None),
        ("Path: D D R R R L R", True, None),  # a detour that still ends on G is a valid path
        ("Path: U D D R R R", False, "off_grid"),  # first move leaves the map
        ("Path: R R D D R", False, "wall"),  # (0, 2) is a wall
        ("Path: D R", False, "wall"),  # (1, 1) is a wall
        ("Path: D D R R", False, "not_at_goal"),  # stops one short
        ("Path: D D R R R R", False, "off_grid"),  # walks past the goal off the map
        ("Path: D D R R R\nPath: R", False, "not_at_goal"),  # the last Path line counts
        ("Path: R\nPath: D D R R R", True, None),
        ("D D R R R", False, "no_path"),  # no Path: line
        ("Path:", False, "no_path"),
        ("Path: D D R R R 3", False, "no_path"),  # a stray token makes it malformed
        ("Path: D D east R R", False, "no_path"),
        ("Path: " + "UD" * 40 + "DDRRR", False, "too_long"),  # over 4 x 12 = 48 moves
        ("Path: \x00\ud800", False, "no_path"),
        # v1: markdown around the line or the moves is read through.
        ("**Path:** D D R R R", True, None),
        ("**Path: D D R R R**", True, None),
        ("**Path**: D D R R R", True, None),
        ("Path: `DDRRR`", True, None),
        ("- **Path:** `D D R R R`.", True, None),
        ("Path: [D, D, R, R, R]", True, None),
        ('Path: ["D", "D", "R", "R", "R"]', True, None),
        ("Path: 'D D R R R'", True, None),
        ("Path: “DDRRR”", True, None),
        ("**Path:** D D R R", False, "not_at_goal"),  # read, and still graded
        ("**Path:** `D D east R R`", False, "no_path"),  # wrappings, not words
    ],
)
def test_grader_on_hand_checked_paths(text, correct, failure):
    grade = grade_path(text, MAP)
    assert (grade.correct, grade.failure) == (correct, failure)


@pytest.mark.parametrize("profiles", ["single", "dual"])
def test_v0_ids_build_v1_and_say_what_changed(profiles):
    with pytest.warns(
        marft_envs.OutdatedEnvWarning, match=r"planpath-.*-v1.*\*\*Path:\*\* R D D R"
    ):
        env = marft_envs.make(f"planpath-{profiles}-v0")
    assert env.unwrapped.spec == marft_envs.spec(f"planpath-{profiles}-v1")


def test_simulation_and_search_agree_with_the_hand_drawn_map():
    assert shortest_path(MAP) == "DDRRR"
    assert simulate(MAP, "DDRRR") == ((2, 3), None)
    assert simulate(MAP, "RR") == ((0, 1), "wall")
    assert extract_moves("Path: up, Left.") == "UL"
    assert format_map(MAP) == "S . # .\n. # # .\n. . . G"


def test_generated_maps_are_solvable_and_respect_the_knobs():
    rng = np.random.default_rng(0)
    for size in (3, 5, 8):
        for _ in range(20):
            grid = generate_map(rng, size, 0.4)
            assert grid.rows == grid.cols == size
            path = shortest_path(grid)
            assert path is not None and len(path) >= 2
            assert grade_path(f"Path: {path}", grid).correct


@pytest.mark.parametrize("env_id", ["planpath-single-v1", "planpath-dual-v1"])
def test_the_shortest_path_earns_1_and_a_wall_hit_0(env_id, play):
    infos = play(env_id, lambda agent, base: f"Path: {base._solution()}", size=6)
    graded = {"navigator", "executor"} & set(infos)
    assert {a: r for a, (r, _) in infos.items()} == {a: float(a in graded) for a in infos}
    infos = play(env_id, lambda agent, base: "Path: " + "U" * 12)
    assert all(r == 0.0 and i["failure"] == "off_grid" for r, i in infos.values())


def test_knobs_are_checked():
    env = marft_envs.make("planpath-single-v1", size=7, wall_fraction=0.0)
    env.reset(seed=1)
    assert "#" not in format_map(env.unwrapped.puzzle)
    assert env.unwrapped.puzzle.rows == 7
    with pytest.raises(ValueError, match="size must be an integer from 3 to 10"):
        marft_envs.make("planpath-single-v1", size=2)
    with pytest.raises(ValueError, match=r"wall_fraction must be a number from 0 to 0\.6"):
        marft_envs.make("planpath-single-v1", wall_fraction=0.9)
