"""The built-in environments: one flat list of registrations (see ``docs/envs.md``)."""

from __future__ import annotations

from marft_envs.registration import deprecate, register

# --- toy tasks that exercise the core -------------------------------------------------------
register(
    "relay-v0",
    "marft_envs.toy.relay:RelayEnv",
    description="Chain of agents relays a secret code from the scout to the graded reporter.",
)
register(
    "relay-v1",
    "marft_envs.toy.relay:RelayEnv",
    kwargs={"show_round": True},
    description="relay-v0 with the round number in every observation (unbiased values under truncation).",
)
register(
    "dispatch-v0",
    "marft_envs.toy.dispatch:DispatchEnv",
    description="Orchestrator routes a request to the calculator or the speller (dynamic D).",
)

# --- math teams (paper §5): built-in problems by default; dataset=... loads MATH/GSM8K/tables --
# v0's grader rewarded some wrong answers (see marft_envs/math/env.py); it is not kept, since a
# copy would keep the hole. make("math-dual-v0") still makes an env, as in gymnasium: math-dual-v1,
# with a warning that says so.
register(
    "math-single-v1",
    "marft_envs.math.env:MathEnv",
    kwargs={"profiles": "single"},
    description="One graded actor solves a math problem; reward 1 for an equivalent \\boxed{} answer.",
)
register(
    "math-dual-v1",
    "marft_envs.math.env:MathEnv",
    kwargs={"profiles": "dual"},
    description="Reasoner -> actor (the paper's dual team); the actor's \\boxed{} answer is graded.",
)
register(
    "math-trio-v1",
    "marft_envs.math.env:MathEnv",
    kwargs={"profiles": "trio"},
    description="Reasoner -> actor -> verifier; the verifier's \\boxed{} answer is graded.",
)
register(
    "math-dual-retry-v1",
    "marft_envs.math.env:MathEnv",
    kwargs={"profiles": "dual", "max_attempts": 3},
    description="Dual team with up to 3 attempts; wrong answers come back as feedback.",
)

_GRADER_FIX = (
    "its grader accepted some wrong answers (a value-changing word after the number, e.g. "
    "5\\text{ thousand} scored as 5); v1 has the same prompts and data, graded by the fixed "
    "grader, and the v0 grader is not kept."
)
for _name in ("math-single", "math-dual", "math-trio", "math-dual-retry"):
    deprecate(f"{_name}-v0", f"{_name}-v1", _GRADER_FIX)

# --- code teams: programs graded by hidden unit tests in a sandbox (marft_envs.code.sandbox) -----
register(
    "code-single-v0",
    "marft_envs.code.env:CodeEnv",
    kwargs={"profiles": "single"},
    description="One graded coder writes a Python program; reward 1 when every hidden test passes.",
)
register(
    "code-dual-v0",
    "marft_envs.code.env:CodeEnv",
    kwargs={"profiles": "dual"},
    description="Tester (edge cases, extra asserts) -> coder; the coder's program is graded.",
)
register(
    "code-dual-retry-v0",
    "marft_envs.code.env:CodeEnv",
    kwargs={"profiles": "dual", "max_attempts": 3},
    description="Dual code team with up to 3 attempts; failing programs come back with how they failed.",
)

# --- procedural puzzles: generated per episode (split="train" / "test", disjoint by a hash) -----
register(
    "sudoku-single-v0",
    "marft_envs.puzzles.env:SudokuEnv",
    kwargs={"profiles": "single"},
    description="One graded solver fills a 4x4 Sudoku (blanks=4); reward 1 for a solved grid.",
)
register(
    "sudoku-dual-v0",
    "marft_envs.puzzles.env:SudokuEnv",
    kwargs={"profiles": "dual"},
    description="Planner proposes digits for the blanks -> executor writes the graded 4x4 grid.",
)
register(
    "planpath-single-v0",
    "marft_envs.puzzles.env:PlanPathEnv",
    kwargs={"profiles": "single"},
    description="One graded navigator writes moves from S to G on a 5x5 map with walls.",
)
register(
    "planpath-dual-v0",
    "marft_envs.puzzles.env:PlanPathEnv",
    kwargs={"profiles": "dual"},
    description="Planner describes a route -> executor writes the graded moves, checked by simulation.",
)

# --- tool use: <python>expression</python> runs in the code sandbox; the output comes back ------
register(
    "tool-math-single-v0",
    "marft_envs.tools.env:ToolMathEnv",
    kwargs={"profiles": "single"},
    description="One graded actor may run up to 3 Python expressions before its \\boxed{} answer.",
)
register(
    "tool-math-dual-v0",
    "marft_envs.tools.env:ToolMathEnv",
    kwargs={"profiles": "dual"},
    description="Caller runs Python (up to 3 calls); the answerer, routed to when it stops, answers.",
)
