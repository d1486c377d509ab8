"""The power of a test, and the smallest size that reaches a target power (how a replication is sized
before it runs).

- ``binomial_power``: the two-sided exact binomial test (scipy's binomtest, as
  ``significance.binomial_test``), exact: its rejection region summed under the alternative;
- ``measured_sign_power``: the sign test when each of N runs is measured only with some
  probability (a run patched only if it emerged between two checkpoints), exact: the binomial power
  averaged over how many were measured;
- ``simulated_power``: any test without a closed form (the log-rank test on censored times, a
  bootstrap), by simulation from a seeded numpy Generator, with its Monte Carlo standard error;
- ``smallest_size``: the first size on an ascending grid whose power reaches the target.

Power is P(p < alpha), the judge's rule for a significant row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from emergence_bench.stats.significance import binomial_test


def _check(alpha: float, *probabilities: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    for p in probabilities:
        if not 0 <= p <= 1:
            raise ValueError(f"a probability must lie in [0, 1], not {p}")


def binomial_power(n: int, p: float, p0: float = 0.5, alpha: float = 0.05) -> float:
    """P(the two-sided exact binomial test of n trials against ``p0`` gives p < alpha) when each
    trial succeeds with probability ``p``. 0 for n = 0 (no trial, no evidence)."""
    _check(alpha, p, p0)
    if n < 0:
        raise ValueError(f"n must be ≥ 0, not {n}")
    rejected = [k for k in range(n + 1) if binomial_test(k, n, p0).p < alpha]
    return float(stats.binom.pmf(rejected, n, p).sum()) if rejected else 0.0


def measured_sign_power(runs: int, measured: float, positive: float, alpha: float = 0.05) -> float:
    """The power of the two-sided sign test when each of ``runs`` runs is measured with probability
    ``measured`` and a measured difference is positive with probability ``positive``: the binomial
    power at each count measured, weighted by Binomial(runs, measured)."""
    _check(alpha, measured, positive)
    counts = np.arange(runs + 1)
    weights = stats.binom.pmf(counts, runs, measured)
    return float(sum(w * binomial_power(int(m), positive, 0.5, alpha) for m, w in zip(counts, weights) if w > 0))


@dataclass(frozen=True)
class Power:
    """A power and its Monte Carlo standard error (0: exact)."""

    power: float
    se: float = 0.0


def simulated_power(p_value: Callable[[np.random.Generator], float], alpha: float, sims: int,
                    seed: int = 0) -> Power:
    """P(p < alpha) over ``sims`` data sets, each drawn and tested by ``p_value(rng)`` (one numpy
    default_rng(seed) for all, so the same seed gives the same power)."""
    _check(alpha)
    if sims < 1:
        raise ValueError(f"sims must be ≥ 1, not {sims}")
    rng = np.random.default_rng(seed)
    hits = sum(p_value(rng) < alpha for _ in range(sims))
    power = hits / sims
    return Power(power, math.sqrt(power * (1 - power) / sims))


def smallest_size(power_at: Callable[[int], float], target: float, sizes: Sequence[int]) -> tuple[int | None, float]:
    """(the first of the ascending ``sizes`` whose power reaches ``target``, its power); where none
    does, (None, the power at the largest). Exact binomial power is a sawtooth in n, so this is the
    first size that reaches it, not one past which every size does."""
    if not sizes or list(sizes) != sorted(sizes):
        raise ValueError(f"sizes must be a non-empty ascending grid, got {list(sizes)}")
    if not 0 < target < 1:
        raise ValueError(f"the target power must lie in (0, 1), not {target}")
    power = 0.0
    for size in sizes:
        power = power_at(size)
        if power >= target:
            return size, power
    return None, power
