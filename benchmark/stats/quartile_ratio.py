"""How widely seeds spread in when they emerge: the quartile ratio of relative emergence steps, and
its bootstrap test against a floor (claim 1's statistic, on numbers, so its power can be simulated).

Steps are in training steps; ``math.inf`` marks a run that never emerged within its budget (it ranks
last). Within one task instance each step is divided by the instance's lower median, so two
instances of different difficulty do not read as seed noise; the spread is q75 / q25 of those
relative steps, and a deterministic process spreads only by the eval interval (``min_spread``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def relative_to_median(steps: Sequence[float], latest: float) -> list[float]:
    """One instance's ``steps`` [n] (inf: never) over their lower median; where more than half never
    emerged, over ``latest`` (the latest step any run reached: its budget at the latest), so the
    scale stays finite."""
    middle = sorted(steps)[(len(steps) - 1) // 2]
    scale = middle if math.isfinite(middle) else latest
    return [s / scale for s in steps]


def spread(values: np.ndarray) -> np.ndarray:
    """q75 / q25 of each row of ``values`` [R, n] (inf where q75 is a run that never emerged) -> [R]."""
    q25, q75 = np.quantile(values, [0.25, 0.75], axis=-1, method="inverted_cdf")
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(q75), np.inf, q75 / q25)


def spread_test(relative: Sequence[float], min_spread: float, resamples: int,
                seed: int = 0) -> tuple[float, float, float, float]:
    """(spread, low, high, p) of the relative steps [n]: the observed q75 / q25 with a percentile
    bootstrap 95% interval (``resamples`` resamples from numpy's default_rng(seed)), and p twice the
    share of resamples on the far side of ``min_spread`` (two-sided, at least 2 / (1 + resamples))."""
    values = np.asarray(relative, dtype=float)
    rng = np.random.default_rng(seed)
    replicates = spread(values[rng.integers(0, len(values), (resamples, len(values)))])
    observed = float(spread(values[None])[0])
    low, high = np.quantile(replicates, [0.025, 0.975], method="inverted_cdf")
    tail = min(np.sum(replicates <= min_spread), np.sum(replicates >= min_spread))
    p = float(min(1.0, 2 * (1 + tail) / (1 + len(replicates))))
    return observed, float(low), float(high), p
