"""Worst-case wall time of ``grade_answer`` on hostile responses of up to 1,000,000 characters.

Usage::

    python benchmarks/grader/adversarial_time.py [--length 1000000] [--timeout 2.0] [--repeats 3]

Every response is built to exactly ``--length`` characters (default 1,000,000; the grader scans
up to ``MAX_RESPONSE_CHARS`` = 16,000,000 and refuses longer responses before any work). The families target each step of the pipeline:
box extraction (repeated ``\\boxed`` with and without braces, unclosed braces, deep nesting,
escapes), the bare-answer fallback, normalisation and parsing (a final box holding a
1,000-character answer built to be slow: long operator chains, deep nesting, many ``\\text``
blocks, implicit products of many symbols) and comparison (expensive symbolic work against a
gold that needs it). The script prints the slowest of ``--repeats`` runs per family, cold-cache,
and the overall worst case against the limit.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import sympy

from marft_envs.math import grading


def _fill(unit: str, length: int, tail: str = "") -> str:
    """``unit`` repeated, then ``tail``, padded with spaces to exactly ``length`` characters."""
    body = unit * ((length - len(tail)) // len(unit))
    return (body + tail).ljust(length)


def _final_box(answer: str, length: int, filler: str = "We simplify the expression. ") -> str:
    return _fill(filler, length, f"\\boxed{{{answer}}}")


def _nested(open_: str, close: str, depth: int, core: str = "1") -> str:
    return open_ * depth + core + close * depth


FAMILIES: dict[str, Callable[[int], str]] = {
    "repeated \\boxed1": lambda n: _fill("\\boxed1", n),
    "repeated \\boxed 1 (spaced)": lambda n: _fill("\\boxed 1 ", n),
    "repeated \\boxed{1}": lambda n: _fill("\\boxed{1}", n),
    "repeated \\boxed{} (empty)": lambda n: _fill("\\boxed{}", n),
    "unclosed \\boxed{": lambda n: _fill("\\boxed{", n),
    "unclosed braces then a box": lambda n: _fill("{", n, "\\boxed{2}"),
    "closing braces then a box": lambda n: _fill("}", n, "\\boxed{2}"),
    "deep nesting in one box": lambda n: "\\boxed{" + _nested("{", "}", (n - 9) // 2) + "}",
    "deep nesting, unbalanced": lambda n: _fill("\\boxed{{", n, "}"),
    "escaped braces \\{": lambda n: _fill("\\{", n, "\\boxed{2}"),
    "backslashes": lambda n: _fill("\\", n),
    "\\boxed followed by spaces": lambda n: "\\boxed" + " " * (n - 6),
    "dollar signs": lambda n: _fill("$", n),
    "one long line, no box": lambda n: _fill("1+", n),
    "long operator chain in the box": lambda n: _fill(
        "x", n - 1007, "\\boxed{" + "1+" * 499 + "1}"
    ),
    "final box, 1000-char + chain": lambda n: _final_box("1+" * 499 + "2", n),
    "final box, nested \\frac": lambda n: _final_box(_nested("\\frac{1}{", "}", 110), n),
    "final box, nested \\sqrt": lambda n: _final_box(_nested("\\sqrt{", "}", 140), n),
    "final box, nested parentheses": lambda n: _final_box(_nested("(", ")", 499), n),
    "final box, many \\text blocks": lambda n: _final_box("5" + "\\text{ cm}" * 98, n),
    "final box, product of symbols": lambda n: _final_box("a" * 999, n),
    "final box, tower of powers": lambda n: _final_box("2^{" * 200 + "2" + "}" * 200, n),
    "final box, long comma list": lambda n: _final_box(",".join(["1"] * 400), n),
    "final box, chained relations": lambda n: _final_box("<".join(["x"] * 400), n),
    "final box, \\pm chain": lambda n: _final_box("1" + "\\pm 1" * 150, n),
    "final box, expensive simplify": lambda n: _final_box("(a+b+c+d+1)^{40}(a-1)", n),
}
GOLDS = {
    "final box, expensive simplify": "(a+b+c+d+1)^{40}a-(a+b+c+d+1)^{40}",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1_000_000)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print(f"Python {platform.python_version()}, sympy {sympy.__version__}, length {args.length:,}")
    print(f"timeout {args.timeout} s, slowest of {args.repeats} cold-cache runs per family\n")
    print("| family | chars | grade | worst s |")
    print("|---|---:|---|---:|")
    worst_name, worst = "", 0.0
    for name, build in FAMILIES.items():
        response = build(args.length)
        assert len(response) <= args.length, (name, len(response))
        slowest, verdict = 0.0, None
        for _ in range(args.repeats):
            for fn in (grading._parse_gold, grading._parse_pred, grading._grade_normalised):
                fn.cache_clear()
            start = time.perf_counter()
            verdict = grading.grade_answer(response, GOLDS.get(name, "2"), timeout=args.timeout)
            slowest = max(slowest, time.perf_counter() - start)
        print(f"| {name} | {len(response):,} | {verdict} | {slowest:.3f} |")
        if slowest > worst:
            worst_name, worst = name, slowest
    print(f"\nworst case: {worst_name!r}, {worst:.3f} s against a limit of {args.timeout} s")


if __name__ == "__main__":
    main()
