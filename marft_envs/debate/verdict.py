"""The judge's verdict: who gives the final answer, or who must speak again (pure functions).

The judge ends its reply with one line ``Verdict: ...``; the **last** such line counts:

- ``Verdict: A`` / ``Verdict: B`` (or ``Solver A``): adopt that solver's latest answer;
- ``Verdict: rebut A`` / ``rebut B`` / ``rebut both`` (``rebuttal`` also reads): another round in
  which the named solvers answer again, then the judge decides again.

Letters name the solvers in order (A is the first). Anything else on the line is no verdict.

>>> parse_verdict("B checks out.\\nVerdict: B", ("solver_a", "solver_b"))
Verdict(pick='solver_b', rebut=())
>>> parse_verdict("Verdict: rebut both", ("solver_a", "solver_b")).rebut
('solver_a', 'solver_b')
>>> parse_verdict("I think A", ("solver_a", "solver_b")) is None
True
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Verdict", "parse_verdict"]

_LINE = re.compile(r"verdict[ \t]*:(.*)$", re.IGNORECASE | re.MULTILINE)
_NOISE = re.compile(r"[*_`'\".!]")


@dataclass(frozen=True)
class Verdict:
    """A parsed verdict: the solver whose answer is final, or the solvers asked to speak again."""

    pick: str | None = None
    rebut: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"rebut {', '.join(self.rebut)}" if self.rebut else f"pick {self.pick}"


def _solver(token: str, solvers: Sequence[str]) -> str | None:
    letters = string.ascii_lowercase[: len(solvers)]
    return solvers[letters.index(token)] if len(token) == 1 and token in letters else None


def parse_verdict(text: str, solvers: Sequence[str]) -> Verdict | None:
    """The verdict of the last ``Verdict:`` line of ``text``, or ``None`` when there is none."""
    lines = _LINE.findall(text)
    if not lines:
        return None
    words = _NOISE.sub(" ", lines[-1]).lower().split()
    rebut = bool(words) and words[0] in ("rebut", "rebuttal")
    if rebut:
        words = words[1:]
    if words[:1] == ["solver"]:
        words = words[1:]
    if len(words) != 1:
        return None
    if rebut and words[0] == "both" and len(solvers) == 2:
        return Verdict(rebut=tuple(solvers))
    solver = _solver(words[0], solvers)
    if solver is None:
        return None
    return Verdict(rebut=(solver,)) if rebut else Verdict(pick=solver)
