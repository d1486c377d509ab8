"""Medians and intervals over seeds: the Kaplan–Meier median of right-censored times (one sample, a
batch of resamples) and its interval, and the Wilson interval of a proportion."""

from __future__ import annotations

import math

import numpy as np


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


def kaplan_meier(times: list[float], censored: list[bool]) -> list[tuple[float, float, float]]:
    """The Kaplan–Meier curve at each distinct event time: (time, survival, Greenwood variance)."""
    pairs = sorted(zip(times, censored))
    curve, survival, greenwood, at_risk, i = [], 1.0, 0.0, len(pairs), 0
    while i < len(pairs):
        time = pairs[i][0]
        tied = [c for t, c in pairs[i:] if t == time]
        events = sum(1 for c in tied if not c)
        if events:
            survival *= 1 - events / at_risk
            # Greenwood's sum; when everyone at risk has the event, S = 0 and so is its variance.
            greenwood = greenwood + events / (at_risk * (at_risk - events)) if at_risk > events else math.inf
            variance = 0.0 if survival == 0 else survival * survival * greenwood
            curve.append((time, survival, variance))
        at_risk -= len(tied)
        i += len(tied)
    return curve


def kaplan_meier_median_ci(times: list[float], censored: list[bool],
                           z: float = 1.96) -> tuple[float | None, float | None]:
    """(low, high): a 95% interval for the Kaplan–Meier median in the Brookmeyer–Crowley spirit —
    low is the first event time whose survival is within z·se of 0.5 (S ≤ 0.5 + z·se), high the first
    whose survival is clearly below it (S < 0.5 − z·se). None means not reached within the data."""
    low = high = None
    for time, survival, variance in kaplan_meier(times, censored):
        se = math.sqrt(variance)
        if low is None and survival <= 0.5 + z * se + 1e-12:
            low = time
        if survival < 0.5 - z * se - 1e-12:
            high = time
            break
    return low, high


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion; (0, 1) when there are no trials. It
    always holds the observed proportion: at 0/n and n/n the formula's bound is the proportion
    itself, which float rounding can put a hair outside (6/6 gave 0.9999999999999999)."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def kaplan_meier_medians(times: np.ndarray, censored: np.ndarray) -> np.ndarray:
    """The Kaplan–Meier median of each row of a batch of right-censored samples, as
    ``kaplan_meier_median`` computes it for one; ``inf`` where it is not reached.

    times, censored: [R, n] (float, bool) -> [R]. Used on bootstrap resamples, so it is vectorised:
    a row sorted by (time, censored) puts events before censorings at equal times, and the running
    product of (1 − 1/at_risk) over events is the KM survival (tied events telescope to (1 − d/n)).
    """
    times, censored = np.asarray(times, dtype=float), np.asarray(censored, dtype=bool)
    order = np.lexsort((censored, times), axis=-1)
    times, events = np.take_along_axis(times, order, -1), ~np.take_along_axis(censored, order, -1)
    at_risk = times.shape[-1] - np.arange(times.shape[-1])
    survival = np.cumprod(np.where(events, 1 - 1 / at_risk, 1.0), axis=-1)
    reached = events & (survival <= 0.5 + 1e-12)
    first = reached.argmax(axis=-1)
    return np.where(reached.any(axis=-1), np.take_along_axis(times, first[:, None], -1)[:, 0], np.inf)

