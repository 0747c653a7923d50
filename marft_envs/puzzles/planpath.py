"""Plan-Path: find a way through a small grid with walls (pure functions, no env state).

A grid has a start ``S``, a goal ``G``, walls ``#`` and free cells ``.``; the goal is reachable
from the start (checked by breadth-first search when the grid is drawn). An answer is a line
``Path: R R D L ...`` of moves ``U``/``D``/``L``/``R`` (or ``up``/``down``/``left``/``right``),
separated by spaces or commas or written together (``RRDL``). The grader **simulates** the moves:
a move into a wall or off the grid, or a path that does not end on the goal, is wrong. Any
valid path is accepted, not only a shortest one; the last ``Path:`` line of the text is graded.

>>> grid = parse_map("S . #\\n. . G")
>>> grade_path("Path: D R R", grid).correct
True
>>> grade_path("Path: R R D", grid).failure
'wall'
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MOVES",
    "PathGrade",
    "PlanPathMap",
    "extract_moves",
    "format_map",
    "generate_map",
    "grade_path",
    "parse_map",
    "shortest_path",
    "simulate",
]

#: Row and column change of each move (rows grow downwards).
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_WORDS = {"UP": "U", "DOWN": "D", "LEFT": "L", "RIGHT": "R"}
# ``Path:``, also in markdown: ``**Path:**``, ``**Path**:``, ``__Path__:``.
_PATH_LINE = re.compile(r"path[\s*_]*:(.*)$", re.IGNORECASE | re.MULTILINE)
_TOKEN = re.compile(r"[A-Za-z]+")
# Between moves: spaces, punctuation, arrows, and the wrappings of markdown and lists (bold,
# code, brackets, quotes), as in ``**Path: R D**``, ``Path: `RD` ``, ``Path: ["R", "D"]``.
_SEPARATORS = re.compile(r"^[\s,;.\-→>*_`'\"“”‘’\[\](){}]*$")
Cell = tuple[int, int]


@dataclass(frozen=True)
class PlanPathMap:
    """A grid: ``walls[r][c]`` is True for a wall; ``start`` and ``goal`` are (row, col)."""

    walls: tuple[tuple[bool, ...], ...]
    start: Cell
    goal: Cell

    @property
    def rows(self) -> int:
        return len(self.walls)

    @property
    def cols(self) -> int:
        return len(self.walls[0])

    @property
    def key(self) -> str:
        """The canonical text of the grid (decides its split)."""
        return format_map(self)

    def free(self, cell: Cell) -> bool:
        r, c = cell
        return 0 <= r < self.rows and 0 <= c < self.cols and not self.walls[r][c]


@dataclass(frozen=True)
class PathGrade:
    """A graded answer: ``correct``, and why not (``no_path``, ``wall``, ``off_grid``,
    ``not_at_goal``, ``too_long``)."""

    correct: bool
    failure: str | None
    moves: str | None = None


def format_map(grid: PlanPathMap) -> str:
    """Rows of space-separated cells: ``S``, ``G``, ``#`` or ``.``."""
    lines = []
    for r in range(grid.rows):
        cells = []
        for c in range(grid.cols):
            if (r, c) == grid.start:
                cells.append("S")
            elif (r, c) == grid.goal:
                cells.append("G")
            else:
                cells.append("#" if grid.walls[r][c] else ".")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def parse_map(text: str) -> PlanPathMap:
    """The inverse of :func:`format_map` (for tests and hand-written grids)."""
    rows = [line.split() for line in text.strip().splitlines()]
    if not rows or len({len(r) for r in rows}) != 1:
        raise ValueError(f"A map needs rows of equal length, got {text!r}.")
    start = [(r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if v == "S"]
    goal = [(r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if v == "G"]
    if len(start) != 1 or len(goal) != 1:
        raise ValueError(f"A map needs exactly one S and one G, got {text!r}.")
    walls = tuple(tuple(v == "#" for v in row) for row in rows)
    return PlanPathMap(walls, start[0], goal[0])


def shortest_path(grid: PlanPathMap) -> str | None:
    """A shortest move string from start to goal (breadth-first search), or ``None``."""
    previous: dict[Cell, tuple[Cell, str] | None] = {grid.start: None}
    queue = collections.deque([grid.start])
    while queue:
        cell = queue.popleft()
        if cell == grid.goal:
            moves = []
            while previous[cell] is not None:
                cell, move = previous[cell]  # type: ignore[misc]
                moves.append(move)
            return "".join(reversed(moves))
        for move, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if grid.free(nxt) and nxt not in previous:
                previous[nxt] = (cell, move)
                queue.append(nxt)
    return None


def generate_map(
    rng: np.random.Generator, size: int, wall_fraction: float, min_distance: int = 2
) -> PlanPathMap:
    """A ``size`` x ``size`` grid with about ``wall_fraction`` walls and a reachable goal at least
    ``min_distance`` moves from the start (grids that fail are redrawn)."""
    while True:
        walls = rng.random((size, size)) < wall_fraction
        start, goal = (divmod(int(i), size) for i in rng.choice(size * size, 2, replace=False))
        walls[start] = walls[goal] = False
        grid = PlanPathMap(tuple(tuple(bool(v) for v in row) for row in walls), start, goal)
        path = shortest_path(grid)
        if path is not None and len(path) >= min_distance:
            return grid


def extract_moves(text: str) -> str | None:
    """The moves of the last ``Path:`` line as a string of ``UDLR``, or ``None`` if it holds
    anything but moves and separators (or no move at all). Markdown around the line or the moves
    (``**Path:** R D``, ``**Path: R D**``, backticks, brackets, quotes) is read through."""
    lines = _PATH_LINE.findall(text)
    if not lines:
        return None
    line = lines[-1]
    moves = []
    for gap, token in zip(_TOKEN.split(line), [*_TOKEN.findall(line), ""], strict=True):
        if not _SEPARATORS.match(gap):
            return None
        word = token.upper()
        if not word:
            continue
        if word in _WORDS:
            moves.append(_WORDS[word])
        elif set(word) <= set(MOVES):
            moves.append(word)
        else:
            return None
    return "".join(moves) or None


def simulate(grid: PlanPathMap, moves: str) -> tuple[Cell, str | None]:
    """Walk ``moves`` from the start: the final cell, or where it stopped and why (``wall``,
    ``off_grid``)."""
    r, c = grid.start
    for move in moves:
        dr, dc = MOVES[move]
        nxt = (r + dr, c + dc)
        if not (0 <= nxt[0] < grid.rows and 0 <= nxt[1] < grid.cols):
            return (r, c), "off_grid"
        if grid.walls[nxt[0]][nxt[1]]:
            return (r, c), "wall"
        r, c = nxt
    return (r, c), None


def grade_path(text: str, grid: PlanPathMap, max_moves: int | None = None) -> PathGrade:
    """1 only for moves that stay on free cells and end on the goal; malformed text is wrong.

    Args:
        max_moves: Longest accepted path (default: four times the number of cells).
    """
    moves = extract_moves(text)
    if moves is None:
        return PathGrade(False, "no_path")
    limit = 4 * grid.rows * grid.cols if max_moves is None else max_moves
    if len(moves) > limit:
        return PathGrade(False, "too_long", moves[:limit])
    end, failure = simulate(grid, moves)
    if failure is not None:
        return PathGrade(False, failure, moves)
    if end != grid.goal:
        return PathGrade(False, "not_at_goal", moves)
    return PathGrade(True, None, moves)
