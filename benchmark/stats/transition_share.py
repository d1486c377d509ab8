"""How abrupt a learning curve's transition was: the measurement behind "emergence is abrupt".

A threshold crossing says *when* a curve got somewhere, not *how*. The paper's thesis is a phase
change: a loss held on a plateau, then a drop that takes a small fraction of the time the plateau
lasted. A smooth power-law decay crosses any threshold too, and must not read as abrupt.

The statistic, on a curve of eval steps t [n] and values y [n] (a loss: lower is progress; pass a
mass or an accuracy negated):

1. Progress is the running minimum m_i = min_{j ≤ i} y_j, so eval noise upwards is not undone
   progress.
2. The drop is D = m_0 − m_{n−1}. Below ``min_drop`` there is no transition to time (None).
3. The transition is the shortest window of evals [t_a, t_b] holding a share ``q`` (0.8) of the drop,
   m_a − m_b ≥ q·D (the earliest such window on ties). Its ``width`` is t_b − t_a.
4. The ``share`` is width / t_b: the fraction of the time until the transition ended that the
   transition took. A plateau of length P followed by a drop of width w gives w / (P + w): small.
   A power law or an exponential from step 0 gives a share near 1 (its drop is spread over every
   decade it ran), whatever its rate.

A transition is **abrupt** when its share is at most ``ABRUPT_SHARE`` (0.25: the drop took at most a
quarter of the time to it, i.e. the plateau before it lasted at least three times as long). Fixed
on constructed curves (``tests/test_abruptness.py``): power laws of exponent 0.2–3 and exponentials
read ≥ 0.5 on a 25-step eval grid, a logistic drop after a plateau ten times its width reads ≤ 0.2.

The share is only as fine as the evals: a transition between two evals has the eval interval as its
width, so ``resolved`` says whether the window spans more than one interval (when it does not, the
share is an upper bound).

The share stays a column, but it ties abruptness to timing: a drop of fixed width reads more abrupt
the later it comes. The abruptness *rule* is ``emergence_bench.stats.transition_fit``'s model comparison
(a plateau then a drop, against a power law and an exponential from step 0, and the width in
decades). ``emergence_bench.results.row_curves`` applies both to a result row's curves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

ABRUPT_SHARE = 0.25  # a transition at most this share of the time to its end is abrupt
DROP_SHARE = 0.8  # the share of the drop the transition window holds


@dataclass(frozen=True)
class Transition:
    """One curve's transition: where it started and ended (eval steps), its width and share, the
    step at which half the drop was done (``midpoint``: what two curves are compared at), the drop
    itself, and whether the window spans more than one eval interval (``resolved``)."""

    start: int
    end: int
    width: int
    share: float
    midpoint: int
    drop: float
    resolved: bool

    @property
    def abrupt(self) -> bool:
        return self.share <= ABRUPT_SHARE

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "abrupt": self.abrupt}


def transition(steps: Sequence[float], values: Sequence[float], min_drop: float = 0.0,
               q: float = DROP_SHARE) -> Transition | None:
    """The transition of the curve ``values`` [n] at eval ``steps`` [n] (increasing; see the module
    docstring); None when it has fewer than two finite points or dropped by less than ``min_drop``
    (or by nothing)."""
    if not 0 < q <= 1:
        raise ValueError(f"q must be in (0, 1], got {q}")
    points = [(int(t), float(y)) for t, y in zip(steps, values) if y is not None and math.isfinite(y)]
    if len(points) < 2:
        return None
    times = [t for t, _ in points]
    low, running = [], math.inf
    for _, y in points:
        running = min(running, y)
        low.append(running)
    drop = low[0] - low[-1]
    if drop <= 0 or drop < min_drop:
        return None
    target = q * drop - 1e-12 * max(1.0, abs(drop))
    best: tuple[int, int] | None = None
    b = 0
    for a in range(len(points)):  # two pointers: m is non-increasing, so the first b that holds is the shortest
        b = max(b, a)
        while b < len(points) and low[a] - low[b] < target:
            b += 1
        if b == len(points):
            break
        if best is None or times[b] - times[a] < times[best[1]] - times[best[0]]:
            best = (a, b)
    assert best is not None  # a = 0 always reaches the whole drop
    a, b = best
    width = times[b] - times[a]
    half = low[0] - drop / 2
    midpoint = next(t for t, m in zip(times, low) if m <= half + 1e-12 * max(1.0, abs(half)))
    return Transition(start=times[a], end=times[b], width=width, share=width / times[b] if times[b] > 0 else 1.0,
                      midpoint=midpoint, drop=drop, resolved=b - a > 1)
