"""Agent profiles of the puzzle teams (Sudoku and Plan-Path).

Prompts are plain text: no chat-template tokens. They are part of each env's version: changing a
prompt here means registering a new env version.
"""

from __future__ import annotations

from marft_envs.core.profiles import AgentProfile

__all__ = ["PLANPATH_TEAMS", "SUDOKU_TEAMS"]

_SUDOKU_RULES = (
    "A 4x4 Sudoku: fill every blank (.) so that each row, each column and each 2x2 box holds the "
    "digits 1, 2, 3 and 4 exactly once, keeping the given digits."
)
_GRID_FORMAT = (
    "End your reply with the completed grid as four lines of four digits, for example:\n"
    "1234\n3412\n2143\n4321"
)

SUDOKU_TEAMS: dict[str, tuple[AgentProfile, ...]] = {
    "single": (
        AgentProfile("solver", f"You are the Solver. {_SUDOKU_RULES} {_GRID_FORMAT}", graded=True),
    ),
    "dual": (
        AgentProfile(
            "planner",
            f"You are the Planner in a team of two (Planner -> Executor). {_SUDOKU_RULES} For each "
            "blank, say which digit goes there and why, e.g. 'row 1, column 2: 3 (row 1 already has "
            "1, 2 and 4)'. Rows and columns count from 1. Do not write the whole grid.",
        ),
        AgentProfile(
            "executor",
            f"You are the Executor in a team of two (Planner -> Executor). {_SUDOKU_RULES} Check the "
            f"Planner's proposals, fix any that break a rule, and write the grid. {_GRID_FORMAT}",
            graded=True,
        ),
    ),
}

_MAP_RULES = (
    "On the map, S is the start, G the goal, # a wall and . a free cell; rows are listed from top "
    "to bottom. Moves are U (up), D (down), L (left) and R (right); a move into a wall or off the "
    "map is not allowed."
)
_PATH_FORMAT = "End your reply with one line 'Path:' and the moves from S to G, e.g. 'Path: R R D'."

PLANPATH_TEAMS: dict[str, tuple[AgentProfile, ...]] = {
    "single": (
        AgentProfile(
            "navigator", f"You are the Navigator. {_MAP_RULES} {_PATH_FORMAT}", graded=True
        ),
    ),
    "dual": (
        AgentProfile(
            "planner",
            f"You are the Planner in a team of two (Planner -> Executor). {_MAP_RULES} Describe a "
            "route from S to G around the walls as a few steps, e.g. 'go down 2 to row 3, then right "
            "to the goal'. Do not write the Path line.",
        ),
        AgentProfile(
            "executor",
            f"You are the Executor in a team of two (Planner -> Executor). {_MAP_RULES} Turn the "
            f"Planner's route into single moves, checking each against the map. {_PATH_FORMAT}",
            graded=True,
        ),
    ),
}
