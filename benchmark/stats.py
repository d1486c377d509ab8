"""Censoring-aware statistics over seeds."""

from __future__ import annotations

import math


def kaplan_meier_median(times: list[float], censored: list[bool]) -> float | None:
    """Median time-to-event of a right-censored sample: the first event time at which the
    Kaplan–Meier survival estimate drops to ≤ 0.5; None when it never does ("not reached").

    A censored time means "had not happened by then" (e.g. never emerged within the budget).
    """
    survival, at_risk = 1.0, len(times)
    # Events before censorings at equal times (the usual convention).
    for time, is_censored in sorted(zip(times, censored), key=lambda pair: (pair[0], pair[1])):
        if not is_censored:
            survival *= 1 - 1 / at_risk
            if survival <= 0.5 + 1e-12:
                return time
        at_risk -= 1
    return None


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion; (0, 1) when there are no trials."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)
