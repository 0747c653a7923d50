"""The 4x4 Sudoku grader on hand-checked grids, the generator, and the sudoku envs."""

from __future__ import annotations

import numpy as np
import pytest

import marft_envs
from marft_envs.puzzles.sudoku import (
    SudokuPuzzle,
    extract_grid,
    generate_sudoku,
    grade_sudoku,
    is_solved,
    parse_grid,
)

SOLUTION = "1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1"
# Two blanks in row 1 and one in row 4: the only completion is SOLUTION.
PUZZLE = SudokuPuzzle(parse_grid("1 . . 4\n3 4 1 2\n2 1 4 3\n4 3 2 ."), parse_grid(SOLUTION))


@pytest.mark.parametrize(
    ("text", "correct", "failure"),
    [
        ("1234\n3412\n2143\n4321", True, None),
        (
            "Filling row 1 with 2, 3 and row 4 with 1:\n\n1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1\n",
            True,
            None,
        ),
        ("```\n| 1 | 2 | 3 | 4 |\n|3,4,1,2|\n2 1 4 3\n4 3 2 1\n```", True, None),
        # A first wrong grid, then the right one: the last grid counts.
        ("1324\n3412\n2143\n4321\nno, fixed:\n1234\n3412\n2143\n4321", True, None),
        # ...and the other way round.
        ("1234\n3412\n2143\n4321\nno, fixed:\n1324\n3412\n2143\n4321", False, "invalid"),
        # Swapping the two blanks of row 1 keeps the givens but repeats 2 and 3 in columns.
        ("1324\n3412\n2143\n4321", False, "invalid"),
        # A solved grid that does not keep the givens (digits relabelled 1<->2).
        ("2134\n3421\n1243\n4312", False, "changed_given"),
        # Givens kept, rules broken: row 4 ends in 4 twice (column 4 holds 4, 2, 3, 4).
        ("1234\n3412\n2143\n4324", False, "invalid"),
        ("", False, "no_grid"),
        ("the answer is 1234 3412 2143 4321", False, "no_grid"),  # one line, not a grid
        ("1234\n3412\n2143", False, "no_grid"),  # three rows
        ("1234\n3412\n2143\n4321\n1234", False, "no_grid"),  # five rows: not a 4x4 grid
        ("12345\n3412\n2143\n4321", False, "no_grid"),  # five digits in a row
        ("1230\n3412\n2143\n4321", False, "no_grid"),  # 0 is not a digit of the puzzle
        ("\\boxed{1234}\n\x00\ud800" * 50, False, "no_grid"),  # garbage, lone surrogates
        # v1: one rule line between the bands of boxes.
        ("1 2 | 3 4\n3 4 | 1 2\n----+----\n2 1 | 4 3\n4 3 | 2 1", True, None),
        ("+---+---+\n|1 2|3 4|\n|3 4|1 2|\n+---+---+\n|2 1|4 3|\n|4 3|2 1|\n+---+---+", True, None),
        ("1324\n3412\n----+----\n2143\n4321", False, "invalid"),  # read, and still graded
        # A rule elsewhere still ends the block: one row, then three, is no grid.
        ("1234\n----\n3412\n2143\n4321", False, "no_grid"),
        ("1234\n3412\n----\n----\n2143\n4321", False, "no_grid"),  # one rule, not two
    ],
)
def test_grader_on_hand_checked_answers(text, correct, failure):
    grade = grade_sudoku(text, PUZZLE)
    assert (grade.correct, grade.failure) == (correct, failure)


@pytest.mark.parametrize("profiles", ["single", "dual"])
def test_v0_ids_build_v1_and_say_what_changed(profiles):
    with pytest.warns(marft_envs.OutdatedEnvWarning, match=r"sudoku-.*-v1.*----\+----"):
        env = marft_envs.make(f"sudoku-{profiles}-v0")
    assert env.unwrapped.spec == marft_envs.spec(f"sudoku-{profiles}-v1")


def test_any_valid_completion_is_accepted_not_only_the_stored_one():
    # Every cell blank but the first row: many completions; a different one still scores.
    puzzle = SudokuPuzzle(parse_grid("1 2 3 4\n. . . .\n. . . .\n. . . ."), parse_grid(SOLUTION))
    other = "1234\n4321\n2143\n3412"
    assert other.replace("\n", "") != SOLUTION.replace(" ", "").replace("\n", "")
    assert grade_sudoku(other, puzzle).correct


def test_extract_grid_reads_separators_and_ignores_other_lines():
    assert extract_grid("x\n1,2,3,4\n3 4 1 2\n2|1|4|3\n4 3 2 1\ny") == parse_grid(SOLUTION)


def test_generator_makes_solved_grids_with_the_asked_blanks():
    rng = np.random.default_rng(0)
    for blanks in (1, 4, 8, 12):
        for _ in range(20):
            puzzle = generate_sudoku(rng, blanks)
            assert is_solved(puzzle.solution)
            assert puzzle.blanks == blanks
            pairs = zip(puzzle.grid, puzzle.solution, strict=True)
            assert all(g in (0, s) for gr, sr in pairs for g, s in zip(gr, sr, strict=True))


@pytest.mark.parametrize("env_id", ["sudoku-single-v1", "sudoku-dual-v1"])
def test_a_solved_grid_earns_1_and_a_wrong_one_0(env_id, play):
    infos = play(env_id, lambda agent, base: "Here it is:\n" + base._solution())
    graded = [a for a in infos if infos[a][1]["graded"]]
    assert all(infos[a][1]["correct"] for a in infos)
    assert {a: r for a, (r, _) in infos.items()} == {
        a: (1.0 if a in ("solver", "executor") else 0.0) for a in infos
    }
    assert graded
    infos = play(env_id, lambda agent, base: "1111\n2222\n3333\n4444")
    assert all(r == 0.0 for r, _ in infos.values())
    assert all(i["failure"] in ("changed_given", "invalid") for _, i in infos.values())


def test_the_executor_sees_the_planner_and_the_planner_sees_nothing():
    env = marft_envs.make("sudoku-dual-v1")
    env.reset(seed=3)
    assert env.agent_selection == "planner"
    planner_view = env.observe("planner")["messages"][-1]["content"]
    env.step("row 1, column 2: 3 SECRET-NOTE")
    executor_view = env.observe("executor")["messages"][-1]["content"]
    assert "SECRET-NOTE" in executor_view and "SECRET-NOTE" not in planner_view
    assert executor_view.startswith(planner_view)


def test_blanks_is_the_difficulty_knob_and_bad_values_are_refused():
    env = marft_envs.make("sudoku-single-v1", blanks=9)
    env.reset(seed=0)
    assert env.unwrapped.puzzle.blanks == 9
    assert env.observe("solver")["messages"][-1]["content"].count(".") == 9 + 1  # + "(. is"
    for bad in (0, 13, 2.5, True):
        with pytest.raises(ValueError, match="blanks must be an integer from 1 to 12"):
            marft_envs.make("sudoku-single-v1", blanks=bad)
    with pytest.raises(ValueError, match="split='test' for held-out"):
        marft_envs.make("sudoku-single-v1", split="validation")
