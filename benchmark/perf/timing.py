"""The arithmetic of interleaved timing: blocks of a reference alternate with blocks of what is
compared, and each repeat's ratio is against the reference blocks just before and after it, so a
load that drifts slowly cancels (`speed`'s every table).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def summary(values: list[float]) -> dict:
    """The median of per-repeat ``values`` with their spread: {median, min, max, q1, q3, values}."""
    values = [float(v) for v in values]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "q1": q1, "q3": q3,
            "values": values}


def bracketed(reference: list[float], other: list[float]) -> list[float]:
    """Per repeat r: other[r] / mean(reference[r], reference[r + 1]), the reference blocks timed just
    before and just after block r (so a load that drifts linearly cancels). len(reference) = R + 1."""
    if len(reference) != len(other) + 1:
        raise ValueError(f"need one more reference block than others, got {len(reference)} and {len(other)}")
    return [o / ((reference[r] + reference[r + 1]) / 2) for r, o in enumerate(other)]


def interleave(reference: tuple, others: dict, repeats: int,
               clock: Callable[[], float] = time.perf_counter) -> tuple[list, dict]:
    """Time blocks in the order ref, others..., ref, others reversed..., ref, ... (R repeats, R + 1
    reference blocks). ``reference`` and each of ``others`` (name -> ...) is (run, steps): ``run(steps)``
    trains ``steps`` steps. Returns (reference seconds per step [R + 1], {name: seconds per step [R]})."""

    def timed(run: Callable[[int], object], steps: int) -> float:
        start = clock()
        run(steps)
        return (clock() - start) / steps

    ref = [timed(*reference)]
    times: dict = {name: [] for name in others}
    for r in range(repeats):
        for name in list(others) if r % 2 == 0 else list(others)[::-1]:
            times[name].append(timed(*others[name]))
        ref.append(timed(*reference))
    return ref, times
