"""Right answers written in edge forms: how many the math grader refuses, and how many wrong
answers in the same forms it pays.

Usage::

    PYTHONPATH=. python benchmarks/grader/edge_forms.py [--show] [--json OUT]

Every case is an answer as a model might write it (a vulgar fraction, grouped digits, ``5 (five)``,
``{a \\over b}``, ``\\dfrac``, a mixed number, scientific notation, units, currency, percent,
degrees, ``\\text{}``, ``\\boxed`` variants, trailing periods, ``x = 5``, minus signs, ...), the
gold answer it equals, and a gold it does not equal. Each case is graded twice: against its gold
(a refusal is a right answer refused) and against the wrong gold (a payment is a wrong answer
paid). Answers go into a response ``The answer is $\\boxed{...}$.`` unless the case is a whole
response (``RAW``: a bare answer, markdown, a box of another spelling). Grading is as the envs
grade, with the problem text given; ``--no-problem`` grades without it (stricter: every
unevaluated computation of a plain-number gold is refused).

The set was written by the project, with the grader in view, after the issue's outside held-out
set of 139 edge forms was reported (that set is not public): it is a regression target for the
same kinds of form, not an unbiased estimate of the outside set's refusal rate.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from marft_envs.math.grading import grade_answer

RAW = "raw"
"""Mark of a case whose answer is the whole response, not put in a box."""

#: The problem text every case is graded with (the envs pass theirs); it restates no computation.
PROBLEM = "Find the value asked for in the question and give it as your final answer."


@dataclass(frozen=True)
class Case:
    """One edge form: the answer, the gold it equals, a gold it does not."""

    family: str
    answer: str
    gold: str
    wrong: str
    raw: bool = False

    def response(self) -> str:
        return self.answer if self.raw else f"The answer is $\\boxed{{{self.answer}}}$."


def _cases(family: str, rows: list[tuple[str, ...]]) -> list[Case]:
    return [Case(family, r[0], r[1], r[2], raw=len(r) > 3 and r[3] == RAW) for r in rows]


CASES: list[Case] = [
    *_cases(
        "vulgar fraction",
        [
            ("½", "\\frac{1}{2}", "\\frac{1}{4}"),
            ("⅓", "\\frac{1}{3}", "\\frac{2}{3}"),
            ("⅔", "\\frac{2}{3}", "\\frac{1}{3}"),
            ("¼", "0.25", "0.4"),
            ("¾", "\\frac34", "\\frac43"),
            ("⅕", "0.2", "5"),
            ("⅖", "\\frac{2}{5}", "\\frac{5}{2}"),
            ("⅗", "0.6", "0.35"),
            ("⅘", "\\frac{4}{5}", "\\frac{4}{6}"),
            ("⅙", "\\frac{1}{6}", "\\frac{1}{5}"),
            ("⅚", "\\frac{5}{6}", "\\frac{6}{5}"),
            ("⅛", "0.125", "0.18"),
            ("⅜", "\\frac{3}{8}", "\\frac{3}{5}"),
            ("⅝", "0.625", "0.58"),
            ("⅞", "\\frac{7}{8}", "\\frac{8}{7}"),
            ("⅐", "\\frac{1}{7}", "\\frac{1}{8}"),
            ("⅑", "\\frac{1}{9}", "\\frac{1}{8}"),
            ("⅒", "0.1", "10"),
            ("1½", "\\frac{3}{2}", "\\frac{1}{2}"),
            ("2¾", "\\frac{11}{4}", "\\frac{3}{4}"),
            ("-½", "-\\frac{1}{2}", "\\frac{1}{2}"),
            ("1⁄2", "\\frac{1}{2}", "2"),
            ("3⁄4", "0.75", "0.34"),
        ],
    ),
    *_cases(
        "digit grouping",
        [
            ("1'000", "1000", "100"),
            ("1'234'567", "1234567", "1234"),
            ("1 000", "1000", "1"),
            ("1\u2009000", "1000", "1"),
            ("1\u202f000", "1000", "10000"),
            ("1\u00a0000", "1000", "1"),
            ("1\\,000", "1000", "1"),
            ("1{,}000", "1000", "1"),
            ("1,000", "1000", "1"),
            ("12,345,678", "12345678", "12345"),
            ("1\\ 000", "1000", "1"),
            ("1 000 000", "1000000", "1000"),
            ("1 000.5", "1000.5", "1000"),
            ("1,000.25", "1000.25", "1000"),
            ("-1 000", "-1000", "1000"),
            ("10\\,000", "10000", "10"),
        ],
    ),
    *_cases(
        "number and its words",
        [
            ("5 (five)", "5", "6"),
            ("five (5)", "5", "6"),
            ("12 (twelve)", "12", "13"),
            ("5\\ (\\text{five})", "5", "4"),
            ("\\text{5 (five)}", "5", "15"),
            ("five", "5", "4"),
            ("twenty-one", "21", "20"),
            ("21 (twenty-one)", "21", "12"),
        ],
    ),
    *_cases(
        "over",
        [
            ("{1 \\over 2}", "\\frac{1}{2}", "2"),
            ("{3\\over4}", "0.75", "\\frac{4}{3}"),
            ("1 \\over 2", "0.5", "\\frac{1}{3}"),
            ("-{1 \\over 2}", "-\\frac{1}{2}", "\\frac{1}{2}"),
            ("{22 \\over 7}", "\\frac{22}{7}", "\\frac{7}{22}"),
            ("{\\pi \\over 2}", "\\frac{\\pi}{2}", "\\frac{\\pi}{3}"),
        ],
    ),
    *_cases(
        "fraction commands",
        [
            ("\\dfrac{1}{2}", "\\frac{1}{2}", "\\frac{1}{3}"),
            ("\\tfrac{3}{4}", "\\frac{3}{4}", "\\frac{4}{3}"),
            ("\\dfrac12", "0.5", "12"),
            ("\\tfrac34", "\\frac{3}{4}", "34"),
            ("\\cfrac{1}{2}", "\\frac12", "\\frac13"),
            ("\\frac12", "\\frac{1}{2}", "\\frac{2}{1}"),
            ("\\frac 1 2", "\\frac{1}{2}", "\\frac{1}{3}"),
            ("-\\dfrac{1}{2}", "-\\frac{1}{2}", "\\frac{1}{2}"),
            ("\\dfrac{-1}{2}", "-\\frac{1}{2}", "\\frac{1}{2}"),
            ("\\frac{1}{-2}", "-\\frac{1}{2}", "\\frac{1}{2}"),
            ("\\left(\\dfrac{1}{2}\\right)", "\\frac{1}{2}", "\\frac{1}{4}"),
            ("\\dfrac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{2}}{2}"),
            ("1/2", "\\frac{1}{2}", "2"),
            ("3/4", "0.75", "\\frac{4}{3}"),
            ("\\frac{6}{8}", "\\frac{3}{4}", "\\frac{6}{9}"),
        ],
    ),
    *_cases(
        "mixed number",
        [
            ("1\\frac{1}{2}", "\\frac{3}{2}", "\\frac{1}{2}"),
            ("2\\tfrac{1}{4}", "\\frac{9}{4}", "\\frac{1}{2}"),
            ("3 \\frac{1}{2}", "3.5", "1.5"),
            ("2\\dfrac{3}{4}", "\\frac{11}{4}", "\\frac{3}{2}"),
            ("-1\\frac{1}{2}", "-\\frac{3}{2}", "-\\frac{1}{2}"),
            ("1 1/2", "\\frac{3}{2}", "\\frac{11}{2}"),
            ("3\\frac12", "3.5", "1.5"),
        ],
    ),
    *_cases(
        "times ten to the k",
        [
            ("3.9\\times 10^{2}", "390", "39"),
            ("3.9 \\times 10^2", "390", "3900"),
            ("3.9\\cdot 10^{2}", "390", "39"),
            ("3.9 × 10^2", "390", "39"),
            ("3.9·10^3", "3900", "390"),
            ("3.9 x 10^2", "390", "39"),
            ("3.9*10^2", "390", "39"),
            ("3.9 \\times 10^{-2}", "0.039", "0.39"),
            ("1.5\\times10^{3}", "1500", "150"),
            ("6.02\\times 10^{23}", "6.02\\times 10^{23}", "6.02\\times 10^{22}"),
            ("3.9×10²", "390", "39"),
            ("2.5 \\times 10^{-3}", "0.0025", "0.025"),
            ("1.2 \\times 10^{6}", "1200000", "120000"),
            ("10^{3}", "1000", "100"),
        ],
    ),
    *_cases(
        "e-notation",
        [
            ("3.9e2", "390", "39"),
            ("3.9E2", "390", "3900"),
            ("3.9e+2", "390", "39"),
            ("2.5e-3", "0.0025", "0.025"),
            ("1e6", "1000000", "100000"),
            ("1E-3", "0.001", "0.01"),
        ],
    ),
    *_cases(
        "units",
        [
            ("5 cm", "5", "6"),
            ("5\\text{ cm}", "5", "50"),
            ("5 \\mathrm{cm}", "5", "4"),
            ("5\\,\\text{m}", "5", "6"),
            ("12 meters", "12", "13"),
            ("5 kg", "5", "4"),
            ("60 \\text{ mph}", "60", "6"),
            ("3\\text{ hours}", "3", "4"),
            ("10 \\text{ square units}", "10", "100"),
            ("25 \\text{ cm}^2", "25", "5"),
            ("7 \\text{ inches}", "7", "8"),
            ("4 \\text{ seconds}", "4", "5"),
        ],
    ),
    *_cases(
        "currency",
        [
            ("\\$5", "5", "6"),
            ("\\$5.00", "5", "6"),
            ("5 dollars", "5", "4"),
            ("\\$1,000", "1000", "1"),
            ("USD 5", "5", "15"),
            ("€5", "5", "6"),
            ("£5", "5", "6"),
            ("5 €", "5", "4"),
            ("\\$0.50", "0.5", "50"),
            ("\\text{\\$}12", "12", "13"),
        ],
    ),
    *_cases(
        "percent",
        [
            ("25\\%", "25", "26"),
            ("25%", "25", "2.5"),
            ("25 percent", "25", "26"),
            ("25 \\text{ percent}", "25", "24"),
            ("25", "25\\%", "26\\%"),
            ("12.5\\%", "12.5", "1.25"),
        ],
    ),
    *_cases(
        "degrees",
        [
            ("30^\\circ", "30", "60"),
            ("30°", "30", "3"),
            ("30^{\\circ}", "30", "31"),
            ("30 degrees", "30", "60"),
            ("30\\text{ degrees}", "30", "45"),
            ("30", "30^\\circ", "60^\\circ"),
            ("45 \\degree", "45", "30"),
        ],
    ),
    *_cases(
        "text",
        [
            ("\\text{5}", "5", "6"),
            ("\\textbf{5}", "5", "6"),
            ("\\mathrm{5}", "5", "6"),
            ("\\mathbf{5}", "5", "4"),
            ("\\text{The answer is } 5", "5", "6"),
            ("\\textbf{7}", "7", "1"),
        ],
    ),
    *_cases(
        "boxed",
        [
            ("The answer is \\boxed{5}.", "5", "6", RAW),
            ("The answer is \\boxed 5.", "5", "6", RAW),
            ("The answer is \\boxed{\\boxed{5}}.", "5", "6", RAW),
            ("The answer is \\fbox{5}.", "5", "6", RAW),
            ("The answer is \\boxed{{5}}.", "5", "6", RAW),
            ("So \\[\\boxed{5}\\]", "5", "6", RAW),
            ("The answer is \\boxed{ 5 }.", "5", "6", RAW),
            ("The answer is \\boxed{x=5}.", "5", "6", RAW),
            ("The answer is \\boxed{\\text{5}}.", "5", "6", RAW),
            ("The answer is $\\boxed{\\mathbf{5}}$", "5", "6", RAW),
            ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", "\\frac{1}{3}", RAW),
        ],
    ),
    *_cases(
        "trailing period",
        [
            ("5.", "5", "6"),
            ("The answer is \\boxed{5.}", "5", "6", RAW),
            ("5.0", "5", "6"),
            ("5.00", "5", "50"),
            ("\\frac{1}{2}.", "\\frac{1}{2}", "\\frac{1}{3}"),
            ("The answer is 5.", "5", "6", RAW),
        ],
    ),
    *_cases(
        "words around",
        [
            ("x = 5", "5", "6"),
            ("x=5", "5", "6"),
            ("n = 12", "12", "13"),
            ("a = -3", "-3", "3"),
            ("\\text{Answer: } 5", "5", "6"),
            ("Answer: 5", "5", "6", RAW),
            ("Final answer: 42", "42", "24", RAW),
            ("**5**", "5", "6", RAW),
            ("The answer is **12**.", "12", "21", RAW),
            ("x = \\frac{1}{2}", "\\frac{1}{2}", "2"),
        ],
    ),
    *_cases(
        "negative",
        [
            ("-5", "-5", "5"),
            ("−5", "-5", "5"),
            ("- 5", "-5", "5"),
            ("(-5)", "-5", "5"),
            ("-(5)", "-5", "5"),
            ("\\(-5\\)", "-5", "5"),
            ("−\\frac{1}{2}", "-\\frac{1}{2}", "\\frac{1}{2}"),
            ("−½", "-\\frac{1}{2}", "\\frac{1}{2}"),
            ("−3.9 \\times 10^{2}", "-390", "390"),
            ("-0.5", "-\\frac{1}{2}", "\\frac{1}{2}"),
            ("{-5}", "-5", "5"),
            ("\\text{−}5", "-5", "5"),
        ],
    ),
    *_cases(
        "other spellings",
        [
            (".5", "0.5", "5"),
            ("0.50", "\\frac{1}{2}", "\\frac{1}{5}"),
            ("2π", "2\\pi", "\\pi"),
            ("√3", "\\sqrt{3}", "\\sqrt{2}"),
            ("2√3", "2\\sqrt{3}", "3\\sqrt{2}"),
            ("∞", "\\infty", "-\\infty"),
            ("\\sqrt3", "\\sqrt{3}", "\\sqrt{2}"),
            ("3\\sqrt{2}", "\\sqrt{18}", "\\sqrt{12}"),
            ("(1,\\ 2)", "(1, 2)", "(2, 1)"),
            ("\\left( 1, 2 \\right)", "(1,2)", "(1,3)"),
            ("x^2", "x^{2}", "x^{3}"),
            ("５", "5", "6"),
        ],
    ),
]


def grade_set(cases: list[Case], problem: str | None) -> dict[str, object]:
    """Refused right answers and paid wrong ones, by family, with the cases named."""
    refused = [c for c in cases if not grade_answer(c.response(), c.gold, problem=problem)]
    paid = [c for c in cases if grade_answer(c.response(), c.wrong, problem=problem)]
    return {
        "right_answers": len(cases),
        "refused_right": len(refused),
        "wrong_answers": len(cases),
        "paid_wrong": len(paid),
        "families": dict(Counter(c.family for c in cases)),
        "refused": [[c.family, c.answer, c.gold] for c in refused],
        "paid": [[c.family, c.answer, c.wrong] for c in paid],
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="list every refused and paid case")
    parser.add_argument("--no-problem", action="store_true", help="grade without problem text")
    parser.add_argument("--json", type=Path, help="write the result as JSON to this file")
    args = parser.parse_args(argv)
    result = grade_set(CASES, None if args.no_problem else PROBLEM)
    print(
        f"edge forms: {result['right_answers']} right answers, {result['refused_right']} refused; "
        f"{result['wrong_answers']} wrong answers in the same forms, {result['paid_wrong']} paid "
        f"({'without' if args.no_problem else 'with'} the problem text)"
    )
    if args.show:
        for family, answer, gold in result["refused"]:  # type: ignore[attr-defined]
            print(f"  refused ({family}): {answer!r} for gold {gold!r}")
        for family, answer, wrong in result["paid"]:  # type: ignore[attr-defined]
            print(f"  PAID WRONG ({family}): {answer!r} for gold {wrong!r}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(1 if main()["paid_wrong"] else 0)
