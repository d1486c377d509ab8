"""Bisection over saved checkpoints: the earliest step whose checkpoint solves the task.

Generic over a predicate ``solves(step) -> bool`` assumed monotone over the sorted steps (False …
False True … True), as the paper's binary search assumes. A search over n checkpoints evaluates at
most ⌈log2(n + 1)⌉ of them, and never the same step twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable


@dataclass
class Bisection:
    """The answer of a search over ``steps``.

    first_solved:  the earliest step that solves (None: no checkpoint solves, censored)
    last_unsolved: the step just before it (None: the first checkpoint already solves)
    evaluated:     [(step, solved)] in the order the predicate was called
    """

    steps: list[int]
    first_solved: int | None
    last_unsolved: int | None
    evaluated: list[tuple[int, bool]] = field(default_factory=list)

    @property
    def evaluations(self) -> int:
        return len(self.evaluated)

    @property
    def censored(self) -> bool:
        return self.first_solved is None

    def to_dict(self) -> dict:
        return {
            "first_solved": self.first_solved,
            "last_unsolved": self.last_unsolved,
            "bracket": [self.last_unsolved, self.first_solved],
            "censored": self.censored,
            "checkpoints": len(self.steps),
            "evaluations": self.evaluations,
            "evaluated": [[step, solved] for step, solved in self.evaluated],
        }


def bisect_steps(steps: Iterable[int], solves: Callable[[int], bool]) -> Bisection:
    """Binary search for the earliest of ``steps`` where ``solves`` holds (steps are sorted here)."""
    steps = sorted(set(int(s) for s in steps))
    evaluated: list[tuple[int, bool]] = []
    # Invariant: every index < lo fails, every index ≥ hi solves (hi = n stands for "never").
    lo, hi = 0, len(steps)
    while lo < hi:
        mid = (lo + hi) // 2
        solved = bool(solves(steps[mid]))
        evaluated.append((steps[mid], solved))
        if solved:
            hi = mid
        else:
            lo = mid + 1
    first = steps[lo] if lo < len(steps) else None
    before = steps[lo - 1] if lo > 0 else None
    return Bisection(steps, first, before, evaluated)
