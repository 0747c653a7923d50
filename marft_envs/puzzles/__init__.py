"""Procedural puzzles for LLM teams: 4x4 Sudoku and Plan-Path (grid navigation)."""

from marft_envs.puzzles.env import PlanPathEnv, PuzzleEnv, SudokuEnv
from marft_envs.puzzles.planpath import PlanPathMap, grade_path
from marft_envs.puzzles.sudoku import SudokuPuzzle, grade_sudoku

__all__ = [
    "PlanPathEnv",
    "PlanPathMap",
    "PuzzleEnv",
    "SudokuEnv",
    "SudokuPuzzle",
    "grade_path",
    "grade_sudoku",
]
