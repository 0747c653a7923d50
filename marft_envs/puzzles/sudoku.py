"""4x4 Sudoku: generation, the text format and the exact grader (pure functions, no env state).

A 4x4 Sudoku holds the digits 1-4 once in every row, every column and every 2x2 box. A puzzle is
a solved grid with ``blanks`` cells emptied (shown as ``.``); more blanks make it harder. Any grid
that keeps the given digits and satisfies the three rules is accepted, so a puzzle with several
completions has several right answers.

Answers are written as four lines of four digits (spaces, commas or ``|`` between digits are
allowed); the grader takes the **last** block of exactly four consecutive such lines in the text.

>>> puzzle = parse_grid("1 . 3 4\\n3 4 1 2\\n2 1 4 3\\n4 3 2 1")
>>> grade_sudoku("The grid:\\n1234\\n3412\\n2143\\n4321", puzzle).correct
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = [
    "SIZE",
    "SudokuGrade",
    "SudokuPuzzle",
    "extract_grid",
    "format_grid",
    "generate_sudoku",
    "grade_sudoku",
    "is_solved",
    "parse_grid",
]

SIZE = 4
_BOX = 2
Grid = tuple[tuple[int, ...], ...]
# A row of the answer: four digits 1-4, optionally separated by spaces, commas or bars.
_ROW = re.compile(r"^\|?\s*([1-4])(?:[\s,|]*([1-4])){3}\s*\|?$")
# A rule between the two bands of 2x2 boxes: ``----+----``, ``---|---``, ``+---+---+``, ``===``.
_RULE = re.compile(r"^[\s+|:]*[-=_—─][-=_—─\s+|:┼]*$")


@dataclass(frozen=True)
class SudokuPuzzle:
    """A puzzle (0 marks a blank) and one solution of it."""

    grid: Grid
    solution: Grid

    @property
    def blanks(self) -> int:
        return sum(v == 0 for row in self.grid for v in row)

    @property
    def key(self) -> str:
        """The canonical text of the puzzle (decides its split)."""
        return format_grid(self.grid)


@dataclass(frozen=True)
class SudokuGrade:
    """A graded answer: ``correct``, and why not (``no_grid``, ``changed_given``, ``invalid``)."""

    correct: bool
    failure: str | None
    answer: Grid | None = None


def format_grid(grid: Grid) -> str:
    """Rows of space-separated digits, ``.`` for a blank."""
    return "\n".join(" ".join(str(v) if v else "." for v in row) for row in grid)


def parse_grid(text: str) -> Grid:
    """The inverse of :func:`format_grid` (for tests and hand-written puzzles)."""
    rows = [line.split() for line in text.strip().splitlines()]
    if len(rows) != SIZE or any(len(r) != SIZE for r in rows):
        raise ValueError(f"A 4x4 grid needs 4 rows of 4 cells, got {text!r}.")
    return tuple(tuple(0 if c == "." else int(c) for c in row) for row in rows)


def _units(grid: Grid) -> list[list[int]]:
    rows = [list(r) for r in grid]
    cols = [[grid[r][c] for r in range(SIZE)] for c in range(SIZE)]
    boxes = [
        [grid[r][c] for r in range(br, br + _BOX) for c in range(bc, bc + _BOX)]
        for br in range(0, SIZE, _BOX)
        for bc in range(0, SIZE, _BOX)
    ]
    return rows + cols + boxes


def is_solved(grid: Grid) -> bool:
    """Every row, column and box holds 1-4 exactly once."""
    return all(sorted(unit) == [1, 2, 3, 4] for unit in _units(grid))


def _fill(cells: list[list[int]], rng: np.random.Generator, index: int = 0) -> bool:
    if index == SIZE * SIZE:
        return True
    r, c = divmod(index, SIZE)
    br, bc = r - r % _BOX, c - c % _BOX
    used = set(cells[r]) | {cells[i][c] for i in range(SIZE)}
    used |= {cells[i][j] for i in range(br, br + _BOX) for j in range(bc, bc + _BOX)}
    for digit in rng.permutation(SIZE) + 1:
        if int(digit) not in used:
            cells[r][c] = int(digit)
            if _fill(cells, rng, index + 1):
                return True
            cells[r][c] = 0
    return False


def generate_sudoku(rng: np.random.Generator, blanks: int) -> SudokuPuzzle:
    """A random solved grid (randomised backtracking) with ``blanks`` random cells emptied."""
    cells = [[0] * SIZE for _ in range(SIZE)]
    _fill(cells, rng)
    solution = tuple(tuple(row) for row in cells)
    for index in rng.choice(SIZE * SIZE, size=blanks, replace=False):
        r, c = divmod(int(index), SIZE)
        cells[r][c] = 0
    return SudokuPuzzle(tuple(tuple(row) for row in cells), solution)


def extract_grid(text: str) -> Grid | None:
    """The last block of exactly four consecutive answer rows in ``text``, or ``None``. One rule
    line (``----+----``) may stand between the second and third rows, where the boxes meet."""
    found: Grid | None = None
    block: list[tuple[int, ...]] = []
    ruled = False
    for line in [*text.splitlines(), ""]:
        if _ROW.match(line.strip()):
            block.append(tuple(int(ch) for ch in line if ch in "1234"))
            continue
        if len(block) == _BOX and not ruled and _RULE.match(line.strip()):
            ruled = True
            continue
        ruled = False
        if len(block) == SIZE:
            found = tuple(block)
        block = []
    return found


def grade_sudoku(text: str, puzzle: SudokuPuzzle) -> SudokuGrade:
    """1 only for a solved grid that keeps every given digit; malformed text is wrong, never an error."""
    grid = extract_grid(text)
    if grid is None:
        return SudokuGrade(False, "no_grid")
    for given_row, row in zip(puzzle.grid, grid, strict=True):
        if any(g and g != v for g, v in zip(given_row, row, strict=True)):
            return SudokuGrade(False, "changed_given", grid)
    if not is_solved(grid):
        return SudokuGrade(False, "invalid", grid)
    return SudokuGrade(True, None, grid)
