"""Compare ``marft_envs.math.grading`` with the ``math-verify`` package on labelled cases.

Usage::

    pip install -e ".[benchmarks]"   # math-verify (pinned there), never needed by the library
    PYTHONPATH=. python benchmarks/grader/compare_math_verify.py [--cases tests/data/grading_cases.jsonl]
                                                    [--math500 PATH | --data-dir DIR] [--show-errors]
                                                    [--adversarial-length 100000]

Reports, for each grader: agreement with the labels, false-accept rate (wrong answers accepted),
false-reject rate (right answers rejected) and per-call time (mean, p99), on all cases and on the
cases whose label does not depend on a documented policy choice (``"policy": false``). With a
MATH-500 file it also grades every solution against its own answer (recall) and against the
next problem's answer (false accepts), and every gold answer against presentation-only rewrites
of itself, against a copy with one digit changed, and (for fractional golds) against the exact
decimal and a 4-digit rounding of a repeating decimal. Last, both graders get the hostile long
responses of ``adversarial_time.py`` (repeated ``\\boxed``, unclosed braces, deep nesting, long
operator chains, ...) at ``--adversarial-length`` characters: the slowest call and how many of
them were accepted (none should be).

``PYTHONPATH=.`` makes the checkout's ``marft_envs`` the one imported, not an installed copy.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from marft_envs.math import grading
from marft_envs.math.grading.compare import is_number_literal

try:  # run as a script: this folder is on sys.path
    from adversarial_time import FAMILIES as ADVERSARIAL
except ImportError:  # imported as benchmarks.grader.compare_math_verify
    from benchmarks.grader.adversarial_time import FAMILIES as ADVERSARIAL

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CASES = REPO / "tests" / "data" / "grading_cases.jsonl"
sys.path.insert(0, str(REPO / "benchmarks"))  # the shared runner
from runner import find_data_file  # noqa: E402

MATH500 = "math500.jsonl"  # in --data-dir or $MARFT_DATA (docs/benchmarks.md, "Data files")

Grader = Callable[[str, str, str | None], bool]
"""(response, gold, problem text or None) -> verdict."""


def ours(response: str, gold: str, problem: str | None = None) -> bool:
    # The envs hand the grader the problem text (math-*-v5); a case without one grades alone.
    return grading.grade_answer(response, gold, problem=problem)


def load_math_verify() -> Grader | None:
    try:
        from math_verify import parse, verify
    except ImportError:
        return None
    # Its timeout warnings repeat the whole response (100,000 characters on hostile inputs).
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    def grade(response: str, gold: str, problem: str | None = None) -> bool:
        del problem  # math-verify compares values only
        try:
            return bool(verify(parse(f"${gold}$"), parse(response)))
        except Exception:
            return False

    return grade


def clear_caches() -> None:
    """Start every measured run cold, so cached results do not flatter the timings."""
    for fn in (grading._parse_gold, grading._parse_pred, grading._grade_normalised):
        fn.cache_clear()


def run(grader: Grader, cases: list[dict]) -> tuple[list[bool], list[float]]:
    verdicts, times = [], []
    for case in cases:
        start = time.perf_counter()
        verdicts.append(grader(case["response"], case["gold"], case.get("problem")))
        times.append(time.perf_counter() - start)
    return verdicts, times


def summarise(cases: list[dict], verdicts: list[bool], times: list[float]) -> dict[str, float]:
    pos = [v for c, v in zip(cases, verdicts, strict=True) if c["expected"]]
    neg = [v for c, v in zip(cases, verdicts, strict=True) if not c["expected"]]
    agree = sum(v == c["expected"] for c, v in zip(cases, verdicts, strict=True))
    ordered = sorted(times)
    return {
        "n": len(cases),
        "agreement": agree / len(cases),
        "false_accept": sum(neg) / max(len(neg), 1),
        "false_reject": (len(pos) - sum(pos)) / max(len(pos), 1),
        "mean_ms": 1000 * statistics.fmean(times),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


def table(rows: dict[str, dict[str, float]]) -> str:
    lines = [
        "| grader | cases | agreement | false-accept | false-reject | mean ms/call | p99 ms/call |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in rows.items():
        lines.append(
            f"| {name} | {s['n']} | {s['agreement']:.1%} | {s['false_accept']:.1%} | "
            f"{s['false_reject']:.1%} | {s['mean_ms']:.2f} | {s['p99_ms']:.2f} |"
        )
    return "\n".join(lines)


def math500_check(graders: dict[str, Grader], path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = [
        "| grader | solution vs own answer (accepted) | solution vs next answer (accepted) "
        "| mean ms/call | p99 ms/call |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, grader in graders.items():
        clear_caches()
        pairs = [(r["solution"], r["answer"], r["problem"], True) for r in rows] + [
            (r["solution"], rows[(i + 1) % len(rows)]["answer"], r["problem"], False)
            for i, r in enumerate(rows)
        ]
        verdicts, times = run(
            grader, [{"response": s, "gold": g, "problem": q} for s, g, q, _ in pairs]
        )
        own = sum(v for v, (*_, mine) in zip(verdicts, pairs, strict=True) if mine)
        shifted = sum(v for v, (*_, mine) in zip(verdicts, pairs, strict=True) if not mine)
        ordered = sorted(times)
        lines.append(
            f"| {name} | {own}/{len(rows)} | {shifted}/{len(rows)} "
            f"| {1000 * statistics.fmean(times):.2f} "
            f"| {1000 * ordered[int(0.99 * len(ordered))]:.2f} |"
        )
    return "\n".join(lines)


def bump_digit(gold: str) -> str | None:
    """A wrong answer: the first digit that is not a base subscript, plus one (mod 10)."""
    for m in re.finditer(r"\d", gold):
        i = m.start()
        if "_" not in gold[max(0, i - 2) : i]:
            return gold[:i] + str((int(gold[i]) + 1) % 10) + gold[i + 1 :]
    return None


def rewrites(gold: str) -> list[str]:
    """Presentation-only rewrites of a gold answer; each must grade equal to it."""
    # \dfrac for \frac; whitespace removed wherever TeX ignores it (not between letters).
    out = [gold.replace("\\frac", "\\dfrac"), re.sub(r"(?<![a-zA-Z])\s+|\s+(?![a-zA-Z])", "", gold)]
    if not re.search(r"[,=]|\\cup|\\in|matrix|text|mbox|\\pm|\d\s*\\frac", gold):
        out.append(f"\\left({gold}\\right)")
    return out


def decimal_forms(gold: str) -> tuple[str, bool] | None:
    """For a gold that is a non-integer rational: its exact decimal (right) or a 4-digit rounding
    of a repeating one (wrong)."""
    try:
        value = grading.parse_answer(gold)
    except ValueError:
        return None
    if not isinstance(value, grading.Scalar) or not value.value.is_Rational:
        return None
    frac = Fraction(int(value.value.p), int(value.value.q))
    if frac.denominator == 1:
        return None
    den = frac.denominator
    for prime in (2, 5):
        while den % prime == 0:
            den //= prime
    if den == 1:  # terminating: the exact decimal is the same number
        digits = 0
        while (frac * 10**digits).denominator != 1:
            digits += 1
        return f"{float(frac):.{digits}f}", True
    return f"{float(frac):.4f}", False


def math500_perturbations(graders: dict[str, Grader], path: Path) -> str:
    golds = [json.loads(line)["answer"] for line in path.read_text().splitlines() if line.strip()]
    same = [(r, g) for g in golds for r in rewrites(g)]
    wrong = [(w, g) for g in golds if (w := bump_digit(g)) is not None]
    decimals = [(d, g, ok) for g in golds if (form := decimal_forms(g)) for d, ok in [form]]
    exact = [(d, g) for d, g, ok in decimals if ok]
    rounded = [(d, g) for d, g, ok in decimals if not ok]
    lines = [
        "| grader | presentation rewrites accepted | one-digit changes accepted "
        "| exact decimals of fractions accepted | 4-digit roundings accepted |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, grader in graders.items():
        clear_caches()
        counts = [
            sum(grader(f"$\\boxed{{{r}}}$", g, None) for r, g in pairs)
            for pairs in (same, wrong, exact, rounded)
        ]
        totals = [len(same), len(wrong), len(exact), len(rounded)]
        cells = " | ".join(f"{c}/{t}" for c, t in zip(counts, totals, strict=True))
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def restatements(row: dict) -> list[str]:
    """Answers that restate a computation the problem writes out whose value is the gold: the
    math between ``$`` signs, as written, behind an empty text block, and plus zero."""
    gold = grading.parse_answer(row["answer"])
    if not isinstance(gold, grading.Scalar) or not is_number_literal(gold.raw):
        return []
    out = []
    for segment in re.findall(r"\$([^$]+)\$", row["problem"]):
        segment = segment.strip().rstrip(".,")
        if is_number_literal(grading.normalize_answer(segment)):
            continue  # a number, not a computation: "Write $\\frac{3}{20}$ as a decimal."
        if "=" in segment or not re.search(
            r"[-+^!/]|\\(?:frac|sqrt|binom|times|cdot|div)", segment
        ):
            continue
        try:
            value = grading.parse_answer(segment)
        except ValueError:
            continue
        if isinstance(value, grading.Scalar) and grading.answers_equal(gold, value):
            out += [segment, f"\\text{{}}{segment}", f"({segment})+0"]
    return out


def math500_restating(graders: dict[str, Grader], path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cases = [(a, r["answer"], r["problem"]) for r in rows for a in restatements(r)]
    problems = len({q for _, _, q in cases})
    lines = [
        f"| grader | restatements accepted ({problems} problems) |",
        "|---|---:|",
    ]
    for name, grader in graders.items():
        clear_caches()
        accepted = sum(grader(f"$\\boxed{{{a}}}$", g, q) for a, g, q in cases)
        lines.append(f"| {name} | {accepted}/{len(cases)} |")
    return "\n".join(lines)


def adversarial_check(graders: dict[str, Grader], length: int) -> str:
    responses = {name: build(length) for name, build in ADVERSARIAL.items()}
    lines = [
        "| grader | responses | accepted | mean s/call | slowest s/call (family) |",
        "|---|---:|---:|---:|---|",
    ]
    for name, grader in graders.items():
        clear_caches()
        times, accepted = {}, 0
        for family, response in responses.items():
            start = time.perf_counter()
            accepted += bool(grader(response, "3", None))
            times[family] = time.perf_counter() - start
        worst = max(times, key=times.__getitem__)
        lines.append(
            f"| {name} | {len(responses)} | {accepted} | {statistics.fmean(times.values()):.3f} "
            f"| {times[worst]:.3f} ({worst}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    parser.add_argument(
        "--math500", type=Path, default=None, help=f"default: {MATH500} in --data-dir / $MARFT_DATA"
    )
    parser.add_argument("--data-dir", default=None, help="folder of the data files ($MARFT_DATA)")
    parser.add_argument("--show-errors", action="store_true", help="list every disagreement")
    parser.add_argument(
        "--adversarial-length",
        type=int,
        default=100_000,
        help="characters per hostile response (0: skip)",
    )
    args = parser.parse_args()

    cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
    graders: dict[str, Grader] = {"marft (ours)": ours}
    math_verify = load_math_verify()
    if math_verify is None:
        print("math-verify is not installed (pip install math-verify); reporting ours only.\n")
    else:
        graders["math-verify"] = math_verify

    # Import-time and first-call costs (sympy caches, regex compilation) are not per-call costs.
    for grader in graders.values():
        grader("$\\boxed{1}$", "1", None)

    all_rows, strict_rows, errors = {}, {}, {}
    for name, grader in graders.items():
        clear_caches()
        verdicts, times = run(grader, cases)
        all_rows[name] = summarise(cases, verdicts, times)
        keep = [i for i, c in enumerate(cases) if not c.get("policy")]
        strict_rows[name] = summarise(
            [cases[i] for i in keep], [verdicts[i] for i in keep], [times[i] for i in keep]
        )
        errors[name] = [c for c, v in zip(cases, verdicts, strict=True) if v != c["expected"]]

    print(f"Labelled cases: {args.cases.name} ({len(cases)} cases)\n")
    print("All cases:\n")
    print(table(all_rows))
    print("\nCases whose label does not depend on a documented policy choice:\n")
    print(table(strict_rows))
    math500 = args.math500 or find_data_file(MATH500, args.data_dir)
    if math500 is not None and math500.exists():
        print(f"\nMATH-500 ({math500.name}):\n")
        print(math500_check(graders, math500))
        print("\nMATH-500 gold answers against perturbed copies of themselves:\n")
        print(math500_perturbations(graders, math500))
        print(
            "\nMATH-500 problems whose own computation is the gold, restated (the problem given):\n"
        )
        print(math500_restating(graders, math500))
    if args.adversarial_length:
        print(f"\nHostile responses of {args.adversarial_length:,} characters (gold '3'):\n")
        print(adversarial_check(graders, args.adversarial_length))
    for name, wrong in errors.items():
        print(f"\n{name}: {len(wrong)} disagreements")
        if args.show_errors:
            for c in wrong:
                policy = " [policy]" if c.get("policy") else ""
                print(
                    f"  {c['id']}{policy}: expected {c['expected']}; gold {c['gold']!r}; "
                    f"response ...{c['response'][-60:]!r}"
                )


if __name__ == "__main__":
    main()
