"""Procedural puzzles for LLM teams: 4x4 Sudoku and Plan-Path (grid navigation).

| | |
|---|---|
| Agents | ``solver`` / ``navigator`` (single), ``planner`` → ``executor`` (dual) |
| Dependency | :class:`~marft_envs.core.dependency.Chain` by default (the executor sees the planner's proposal) |
| Observation | the puzzle as text: the grid with ``.`` for blanks (Sudoku) or the map with ``S``, ``G``, ``#`` (Plan-Path) |
| Action | any text; the graded agent's last 4-line grid (Sudoku) or last ``Path:`` line (Plan-Path) is its answer |
| Reward | 1 when every graded agent's answer is right (a solved grid keeping the givens; moves that reach the goal without hitting a wall), else 0 (credit ``graded``) |
| Termination | after one round |
| Versions | v0: initial release (out of date: ``make`` builds v1 and warns); v1: the parsers read markdown wrappings (a ``----+----`` rule between the Sudoku grid's bands; ``**Path:** R D``, ``**Path: R D**``, backticks, brackets, quotes); puzzles and prompts unchanged |

Every puzzle is generated from ``self.np_random``; no data files. ``split="train"`` (default) and
``split="test"`` never share a puzzle: a hash of the puzzle's text decides its split
(:mod:`marft_envs.core.splits`). Difficulty: ``blanks`` (Sudoku, 4 by default), ``size`` and
``wall_fraction`` (Plan-Path, 5x5 with about 30% walls by default). Infos after the round:
``correct``, ``graded`` (per agent), ``failure`` (why the last graded answer was wrong) and
``solution`` (one right answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from marft_envs.core.dependency import DependencyFunction
from marft_envs.core.env import FlexPOMDPEnv, Transition
from marft_envs.core.profiles import AgentProfile, check_graded, named_team
from marft_envs.core.splits import check_split, draw_in_split
from marft_envs.puzzles.planpath import (
    PathGrade,
    PlanPathMap,
    format_map,
    generate_map,
    grade_path,
    shortest_path,
)
from marft_envs.puzzles.profiles import PLANPATH_TEAMS, SUDOKU_TEAMS
from marft_envs.puzzles.sudoku import (
    SIZE,
    SudokuGrade,
    SudokuPuzzle,
    format_grid,
    generate_sudoku,
    grade_sudoku,
)

__all__ = ["PlanPathEnv", "PuzzleEnv", "SudokuEnv"]

Profiles = str | Sequence[AgentProfile | Mapping[str, Any]]


class PuzzleEnv(FlexPOMDPEnv):
    """A team solves one generated puzzle per episode; subclasses supply the puzzle and grader.

    Args:
        profiles: ``"single"``, ``"dual"`` or a list of profiles (graded agents are scored).
        dependency: Turn order and visibility (default: chain).
        split: ``"train"`` or ``"test"`` (held out; disjoint from train by construction).
        **kwargs: Passed to :class:`FlexPOMDPEnv` (``credit``, ``render_mode``, ...).
    """

    family = "puzzle"
    teams: Mapping[str, Sequence[AgentProfile]] = {}

    def __init__(
        self,
        profiles: Profiles = "single",
        dependency: DependencyFunction | None = None,
        *,
        split: str = "train",
        **kwargs: Any,
    ) -> None:
        super().__init__(named_team(profiles, self.teams, self.family), dependency, **kwargs)
        check_graded(self.profiles, self.family, "whose answer is checked")
        self.split = check_split(split, self.family)
        self.puzzle: Any = None

    # -- what a family supplies ----------------------------------------------------------------
    def _generate(self, rng: Any) -> Any:
        raise NotImplementedError

    def _describe(self) -> str:
        raise NotImplementedError

    def _grade(self, text: str) -> SudokuGrade | PathGrade:
        raise NotImplementedError

    def _solution(self) -> str:
        raise NotImplementedError

    # -- the Flex-POMDP hooks ------------------------------------------------------------------
    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        self.puzzle = draw_in_split(self._generate, lambda p: p.key, self.split, self.np_random)

    def _observation(self, agent: str) -> str:
        return self._describe()

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        grades = {a: self._grade(actions[a]) for a in actions if self.profiles[a].graded}
        correct = bool(grades) and all(g.correct for g in grades.values())
        last = list(grades.values())[-1] if grades else None
        return Transition(
            reward=float(correct),
            terminated=True,
            info={
                "correct": correct,
                "graded": {a: g.correct for a, g in grades.items()},
                "failure": last.failure if last is not None else "not_graded",
                "solution": self._solution(),
            },
        )


class SudokuEnv(PuzzleEnv):
    """4x4 Sudoku with ``blanks`` empty cells (the difficulty knob: 1 to 12).

    Args:
        blanks: Cells to fill; more is harder (4 by default).
        others: As :class:`PuzzleEnv` (``profiles``, ``dependency``, ``split``, env options).
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "sudoku_v0"}
    family = "sudoku"
    teams = SUDOKU_TEAMS

    def __init__(
        self, profiles: Profiles = "single", *, split: str = "train", blanks: int = 4, **kwargs: Any
    ) -> None:
        if isinstance(blanks, bool) or not isinstance(blanks, int) or not 1 <= blanks <= 12:
            raise ValueError(
                f"blanks must be an integer from 1 to 12 (cells left empty of {SIZE * SIZE}), "
                f"got {blanks!r}."
            )
        self.blanks = blanks
        super().__init__(profiles, split=split, **kwargs)

    def _generate(self, rng: Any) -> SudokuPuzzle:
        return generate_sudoku(rng, self.blanks)

    def _describe(self) -> str:
        return f"Sudoku (. is a blank):\n{format_grid(self.puzzle.grid)}"

    def _grade(self, text: str) -> SudokuGrade:
        return grade_sudoku(text, self.puzzle)

    def _solution(self) -> str:
        return format_grid(self.puzzle.solution).replace(" ", "")


class PlanPathEnv(PuzzleEnv):
    """A ``size`` x ``size`` map with walls; the answer is a path of moves from S to G.

    Args:
        size: Rows and columns of the map (3 to 10; 5 by default).
        wall_fraction: Share of cells drawn as walls before the map is checked solvable (0 to 0.6).
        others: As :class:`PuzzleEnv` (``profiles``, ``dependency``, ``split``, env options).
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "planpath_v0"}
    family = "planpath"
    teams = PLANPATH_TEAMS

    def __init__(
        self,
        profiles: Profiles = "single",
        *,
        split: str = "train",
        size: int = 5,
        wall_fraction: float = 0.3,
        **kwargs: Any,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or not 3 <= size <= 10:
            raise ValueError(f"size must be an integer from 3 to 10, got {size!r}.")
        if not isinstance(wall_fraction, int | float) or not 0.0 <= wall_fraction <= 0.6:
            raise ValueError(
                f"wall_fraction must be a number from 0 to 0.6 (denser maps rarely connect S and "
                f"G), got {wall_fraction!r}."
            )
        self.size = size
        self.wall_fraction = float(wall_fraction)
        super().__init__(profiles, split=split, **kwargs)

    def _generate(self, rng: Any) -> PlanPathMap:
        return generate_map(rng, self.size, self.wall_fraction)

    def _describe(self) -> str:
        return f"Map:\n{format_map(self.puzzle)}"

    def _grade(self, text: str) -> PathGrade:
        return grade_path(text, self.puzzle)

    def _solution(self) -> str:
        return " ".join(shortest_path(self.puzzle) or "")
