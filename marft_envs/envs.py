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
register(
    "choice-team-v1",
    "marft_envs.choice.env:ChoiceEnv",
    description="Planner picks +, - or \\times for a request in words; only the right one lets the "
    "graded solver compute the answer.",
)

# --- math teams (paper §5): built-in problems by default; dataset=... loads MATH/GSM8K/tables --
# Earlier versions' graders paid some wrong answers (see marft_envs/math/env.py); they are not kept,
# since a copy would keep the holes. make("math-dual-v0") ... make("math-dual-v6") still make an
# env, as in gymnasium: math-dual-v7, with a warning that says so.
register(
    "math-single-v7",
    "marft_envs.math.env:MathEnv",
    kwargs={"profiles": "single"},
    description="One graded actor solves a math problem; reward 1 for an equivalent \\boxed{} answer.",
)
register(
    "math-dual-v7",
    "marft_envs.math.env:MathEnv",
    kwargs={"profiles": "dual"},
    description="Reasoner -> actor (the paper's dual team); the actor's \\boxed{} answer is graded.",
)
register(
    "math-trio-v7",
    "marft_envs.math.env:MathEnv",
    kwargs={"profiles": "trio"},
    description="Reasoner -> actor -> verifier; the verifier's \\boxed{} answer is graded.",
)
register(
    "math-dual-retry-v7",
    "marft_envs.math.env:MathEnv",
    kwargs={"profiles": "dual", "max_attempts": 3},
    description="Dual team with up to 3 attempts; wrong answers come back as feedback.",
)

_GRADER_FIX_V1 = (
    "its grader accepted some wrong answers (a value-changing word after the number, e.g. "
    "5\\text{ thousand} scored as 5)."
)
#: What the grader of issue 27 changed, for every env that grades math answers.
GRADER_FIX_V2 = (
    "its grader paid some wrong answers (5_{1000} or 5\\text{ ways times ways} for 5, digits "
    "after a repeating block, a 200-digit decimal of \\pi for \\pi), refused correct ones (a box "
    "after 1,000,000 characters, a matrix of more than 64 rows) and could hang when grading from "
    "threads. The newest version has the same prompts and data, graded by the fixed grader; the "
    "old graders are not kept."
)
#: What the grader of v3 changed, for every env that grades math answers.
GRADER_FIX_V3 = (
    "its grader paid an unevaluated computation for a numeric answer (6 \\times 8 - 9 for 39, "
    "2^{10} for 1024): RL policies learned to restate 'Compute ...' problems instead of solving "
    "them. The newest version has the same prompts and data; a plain-number gold answer now "
    "needs a number (a worked chain ending in it, 6 \\times 8 - 9 = 39, is still right), and "
    "the old graders are not kept."
)
#: What the grader of v4 changed, for every env that grades math answers.
GRADER_FIX_V4 = (
    "its grader still paid an unevaluated computation for a numeric answer when an empty text "
    "block stood in it (\\text{}6 \\times 8 - 9 or 6 \\times 8\\text{ }-9 for 39): the block "
    "made the answer text, and text escaped v3's rule. The newest version has the same prompts "
    "and data; an empty text block is dropped and text is judged by what it wraps, and the old "
    "graders are not kept."
)
#: What the grader of v5 changed, for every env that grades math answers.
GRADER_FIX_V5 = (
    "its grader refused right answers: any unevaluated form of a plain-number gold (2^{10} for "
    "1024 in a counting problem, \\binom{10}{3} or 5! for 120, AB = \\sqrt{3^2+4^2} = 5), "
    "signed fractions ((-3)/4, -1/-2), -{5}, nested boxes, 1 000, USD 5, five; and it read a gold "
    "3\\frac12 as 3/2. The newest version has the same prompts and data; the env hands the "
    "problem to the grader, which refuses a computation only when it restates the problem "
    "(6 \\times 8 - 9 for 'Compute 6 \\times 8 - 9.'), and the old graders are not kept."
)
#: What the grader of v6 changed, for every env that grades math answers.
GRADER_FIX_V6 = (
    "its grader refused right answers written in edge forms: vulgar fractions (½, 1½), digits grouped by apostrophes (1'000), a number "
    "followed by its words (5 (five)), TeX's {1 \\over 2} and {n \\choose k}, and scientific "
    "notation with x, * or a superscript exponent (3.9 x 10^2). The newest version has the same "
    "prompts and data; no wrong answer is paid (5 (six), 1'00 and 1 000 0000 stay unreadable), "
    "and the old graders are not kept."
)
#: What the grader of v7 changed, for every env that grades math answers.
GRADER_FIX_V7 = (
    "its grader refused right answers written in more edge forms: digits grouped by spaces with "
    "a decimal part (1 000.5), number words joined by a hyphen (twenty-one), a mixed number with "
    "a slash (1 1/2), the words that announce an answer (Answer: 5, Final answer: 42, "
    "\\text{The answer is } 5) and markdown bold around it (**5**). The newest version has the "
    "same prompts and data; no wrong answer is paid (1 3/2 and Answer: not 3 stay unreadable), "
    "and the old graders are not kept."
)
_V7 = f"; then, {GRADER_FIX_V7}"
_V6 = f"; then, {GRADER_FIX_V6[:-1]}{_V7}"
deprecate("choice-team-v0", "choice-team-v1", GRADER_FIX_V7)
for _name in ("math-single", "math-dual", "math-trio", "math-dual-retry"):
    deprecate(f"{_name}-v6", f"{_name}-v7", GRADER_FIX_V7)
    deprecate(f"{_name}-v5", f"{_name}-v7", GRADER_FIX_V6[:-1] + _V7)
    deprecate(
        f"{_name}-v0",
        f"{_name}-v7",
        f"{_GRADER_FIX_V1[:-1]}; later, {GRADER_FIX_V2[:-1]}; later still, {GRADER_FIX_V3[:-1]}; "
        f"then, {GRADER_FIX_V4[:-1]}; last, {GRADER_FIX_V5[:-1]}{_V6}",
    )
    deprecate(
        f"{_name}-v1",
        f"{_name}-v7",
        f"{GRADER_FIX_V2[:-1]}; later, {GRADER_FIX_V3[:-1]}; later still, {GRADER_FIX_V4[:-1]}; "
        f"last, {GRADER_FIX_V5[:-1]}{_V6}",
    )
    deprecate(
        f"{_name}-v2",
        f"{_name}-v7",
        f"{GRADER_FIX_V3[:-1]}; later, {GRADER_FIX_V4[:-1]}; later still, {GRADER_FIX_V5[:-1]}{_V6}",
    )
    deprecate(
        f"{_name}-v3", f"{_name}-v7", f"{GRADER_FIX_V4[:-1]}; later, {GRADER_FIX_V5[:-1]}{_V6}"
    )
    deprecate(f"{_name}-v4", f"{_name}-v7", GRADER_FIX_V5[:-1] + _V6)

# --- code teams: programs graded by hidden unit tests in a sandbox (marft_envs.sandbox.runner) -----
register(
    "code-single-v2",
    "marft_envs.code.env:CodeEnv",
    kwargs={"profiles": "single"},
    description="One graded coder writes a Python program; reward 1 when every hidden test passes.",
)
register(
    "code-dual-v2",
    "marft_envs.code.env:CodeEnv",
    kwargs={"profiles": "dual"},
    description="Tester (edge cases, extra asserts) -> coder; the coder's program is graded.",
)
register(
    "code-dual-retry-v2",
    "marft_envs.code.env:CodeEnv",
    kwargs={"profiles": "dual", "max_attempts": 3},
    description="Dual code team with up to 3 attempts; failing programs come back with how they failed.",
)

_SANDBOX_FIX = (
    "a program could earn reward without solving the task (by defining a builtin the tests call, "
    "or by reading the hidden tests from disk) and failure details were unbounded; v1 has the same "
    "prompts and data, graded in the hardened sandbox, and the v0 sandbox is not kept."
)
#: What the sandbox of v2 changed, for every env whose programs or tool calls run in it.
SANDBOX_FIX_V2 = (
    "a program's own kill of its process (os.kill(os.getpid(), 9)) was reported as 'used up its "
    "CPU time' and is now a runtime_error 'killed by signal 9 (SIGKILL)'; the sandbox refuses "
    "kernel keys (they outlived the run) and new user namespaces, and, where no memory cgroup "
    "counts the run, SysV shared memory and memfd files; no host path (the run's folder, its "
    "cgroup) reaches the program or a failure detail. Prompts and data are unchanged, and the "
    "old sandbox is not kept."
)
for _name in ("code-single", "code-dual", "code-dual-retry"):
    deprecate(f"{_name}-v0", f"{_name}-v2", f"{_SANDBOX_FIX[:-1]}; later, {SANDBOX_FIX_V2}")
    deprecate(f"{_name}-v1", f"{_name}-v2", SANDBOX_FIX_V2)

# --- procedural puzzles: generated per episode (split="train" / "test", disjoint by a hash) -----
register(
    "sudoku-single-v1",
    "marft_envs.puzzles.env:SudokuEnv",
    kwargs={"profiles": "single"},
    description="One graded solver fills a 4x4 Sudoku (blanks=4); reward 1 for a solved grid.",
)
register(
    "sudoku-dual-v1",
    "marft_envs.puzzles.env:SudokuEnv",
    kwargs={"profiles": "dual"},
    description="Planner proposes digits for the blanks -> executor writes the graded 4x4 grid.",
)
register(
    "planpath-single-v1",
    "marft_envs.puzzles.env:PlanPathEnv",
    kwargs={"profiles": "single"},
    description="One graded navigator writes moves from S to G on a 5x5 map with walls.",
)
register(
    "planpath-dual-v1",
    "marft_envs.puzzles.env:PlanPathEnv",
    kwargs={"profiles": "dual"},
    description="Planner describes a route -> executor writes the graded moves, checked by simulation.",
)

_SUDOKU_PARSER_V1 = (
    "v0 refused a solved grid written with a rule between the two bands of boxes "
    "(----+----, +---+---+). Puzzles, prompts and the rules of a solved grid are unchanged."
)
_PLANPATH_PARSER_V1 = (
    "v0 refused a right path in markdown: **Path:** R D D R, **Path: R D D R**, backticks, "
    "brackets and quotes around the moves. Maps, prompts and the simulation are unchanged."
)
for _name in ("sudoku-single", "sudoku-dual"):
    deprecate(f"{_name}-v0", f"{_name}-v1", _SUDOKU_PARSER_V1)
for _name in ("planpath-single", "planpath-dual"):
    deprecate(f"{_name}-v0", f"{_name}-v1", _PLANPATH_PARSER_V1)

# --- tool use: <python>expression</python> runs in the code sandbox; the output comes back ------
register(
    "tool-math-single-v7",
    "marft_envs.tools.env:ToolMathEnv",
    kwargs={"profiles": "single"},
    description="One graded actor may run up to 3 Python expressions before its \\boxed{} answer.",
)
register(
    "tool-math-dual-v7",
    "marft_envs.tools.env:ToolMathEnv",
    kwargs={"profiles": "dual"},
    description="Caller runs Python (up to 3 calls); the answerer, routed to when it stops, answers.",
)
_TIMEOUT_WORDS = (
    "a call past its time limit names both limits (CPU and wall) instead of 'the 2-second limit'."
)
_TOOL_SANDBOX_FIX_V4 = (
    "tool calls run in the sandbox of code-*-v2: an expression that kills its own process reads "
    "'killed by signal 9 (SIGKILL)' instead of a time-out, kernel keys and user namespaces are "
    "refused, and no host path reaches the output."
)
for _name in ("tool-math-single", "tool-math-dual"):
    deprecate(f"{_name}-v6", f"{_name}-v7", GRADER_FIX_V7)
    deprecate(f"{_name}-v5", f"{_name}-v7", GRADER_FIX_V6[:-1] + _V7)
    deprecate(
        f"{_name}-v0",
        f"{_name}-v7",
        f"{GRADER_FIX_V2[:-1]}; later, {GRADER_FIX_V3[:-1]}; later still, {GRADER_FIX_V4[:-1]}; "
        f"then, {_TOOL_SANDBOX_FIX_V4[:-1]}; last, {GRADER_FIX_V5[:-1]}{_V6}",
    )
    deprecate(
        f"{_name}-v1",
        f"{_name}-v7",
        f"{GRADER_FIX_V3[:-1]}; later, {GRADER_FIX_V4[:-1]}; then, {_TOOL_SANDBOX_FIX_V4[:-1]}; "
        f"last, {GRADER_FIX_V5[:-1]}{_V6}",
    )
    deprecate(
        f"{_name}-v2",
        f"{_name}-v7",
        f"{GRADER_FIX_V4[:-1]}; and {_TIMEOUT_WORDS[:-1]}; later, {_TOOL_SANDBOX_FIX_V4[:-1]}; "
        f"last, {GRADER_FIX_V5[:-1]}{_V6}",
    )
    deprecate(
        f"{_name}-v3",
        f"{_name}-v7",
        f"{_TOOL_SANDBOX_FIX_V4[:-1]}; later, {GRADER_FIX_V5[:-1]}{_V6}",
    )
    deprecate(f"{_name}-v4", f"{_name}-v7", GRADER_FIX_V5[:-1] + _V6)

# --- debate: the judge's verdict decides, round by round, who speaks and what is final ----------
register(
    "debate-v7",
    "marft_envs.debate.env:DebateEnv",
    kwargs={"profiles": "debate"},
    description="Solvers A and B answer, the judge picks one or asks for rebuttals (up to 3 rounds).",
)
deprecate("debate-v6", "debate-v7", GRADER_FIX_V7)
deprecate("debate-v5", "debate-v7", GRADER_FIX_V6[:-1] + _V7)
deprecate("debate-v4", "debate-v7", GRADER_FIX_V5[:-1] + _V6)
deprecate("debate-v3", "debate-v7", f"{GRADER_FIX_V4[:-1]}; later, {GRADER_FIX_V5[:-1]}{_V6}")
deprecate(
    "debate-v2",
    "debate-v7",
    f"{GRADER_FIX_V3[:-1]}; later, {GRADER_FIX_V4[:-1]}; later still, {GRADER_FIX_V5[:-1]}{_V6}",
)
deprecate(
    "debate-v1",
    "debate-v7",
    f"{GRADER_FIX_V2[:-1]}; later, {GRADER_FIX_V3[:-1]}; later still, {GRADER_FIX_V4[:-1]}; "
    f"last, {GRADER_FIX_V5[:-1]}{_V6}",
)
deprecate(
    "debate-v0",
    "debate-v7",
    "v0 paid only the final round's agents; later versions also pay a solver idle in the final "
    f"round (pass credit_scope='round' for v0's rule). Also, {GRADER_FIX_V2[:-1]}; later, "
    f"{GRADER_FIX_V3[:-1]}; later still, {GRADER_FIX_V4[:-1]}; last, {GRADER_FIX_V5[:-1]}{_V6}",
)
