"""The comparisons the paper's claims make, each a test with its effect, interval and power.

- ``times``: when two arms got somewhere (emergence, the plateau's end), censored at the budget:
  the ratio of Kaplan–Meier medians (a over b) with a bootstrap interval, the two-sided log-rank p,
  and the smallest ratio these seeds detect;
- ``values``: a number per run (a final loss): the difference of medians (a − b) with a bootstrap
  interval, the two-sided Mann–Whitney p, and the smallest difference these seeds detect;
- ``trend``: times over ordered arms (more heads, more layers): Jonckheere's test with runs that
  never got there ranked last, its effect the concordance (the chance that a run of a later arm took
  longer than a run of an earlier one, ties half: 0.5 is no trend) with a bootstrap interval;
- ``rate``: a share of runs (abrupt, emerged) against a fixed proportion: the exact binomial test
  with a Wilson interval (or the exact Clopper–Pearson one, for a handful of seeds).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from emergence_bench.claims.claim import Evidence, event_times, never_as_inf
from emergence_bench.results.row import Row
from emergence_bench.stats.medians import kaplan_meier_median, wilson_interval
from emergence_bench.stats.significance import (
    binomial_test,
    bootstrap_difference,
    bootstrap_ratio,
    clopper_pearson_interval,
    detectable_shift_ratio,
    jonckheere,
    logrank,
    mann_whitney,
)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _median_text(times: Sequence[float], censored: Sequence[bool]) -> str:
    median = kaplan_meier_median(list(times), list(censored))
    return f">{int(max(times))}" if median is None else f"{median:g}"


def times(a: Sequence[Row], b: Sequence[Row], measurement: str, field: str, names: tuple[str, str],
          predicts: str = "shorter") -> Evidence:
    """Arm ``a`` against arm ``b`` on when they reached ``measurement.field``; the paper predicts a's
    times ``shorter`` (or ``longer``) than b's."""
    ta, ca = event_times(a, measurement, field)
    tb, cb = event_times(b, measurement, field)
    ratio, low, high = bootstrap_ratio(ta, tb, ca, cb)
    test = logrank(ta, ca, tb, cb)
    # logrank's z > 0: a has more events than expected, i.e. a's times are shorter.
    shorter = test.statistic > 0
    direction = 0 if test.statistic == 0 else (1 if shorter == (predicts == "shorter") else -1)
    detect = detectable_shift_ratio(len(ta), len(tb))
    return Evidence(effect=_finite(ratio), low=_finite(low), high=_finite(high), p=test.p, direction=direction,
                    n=f"{len(ta)} vs {len(tb)}",
                    detectable=None if detect is None else (f"a ratio of {1 / detect:.2g}× or {detect:.2g}× "
                                                            "(Mann–Whitney, uncensored log-normal times)"),
                    details=f"KM median {names[0]} {_median_text(ta, ca)} "
                            f"({sum(not c for c in ca)}/{len(ca)} reached), "
                            f"{names[1]} {_median_text(tb, cb)} ({sum(not c for c in cb)}/{len(cb)})",
                    data={names[0]: never_as_inf(ta, ca), names[1]: never_as_inf(tb, cb)},
                    smallest_arm=min(len(ta), len(tb)))


def values(a: Sequence[float], b: Sequence[float], names: tuple[str, str], predicts: str = "lower",
           unit: str = "") -> Evidence:
    """Per-run numbers of arm ``a`` against arm ``b``; the paper predicts a's ``lower`` (or ``higher``)."""
    difference, low, high = bootstrap_difference(a, b)
    test = mann_whitney(a, b)
    lower = difference < 0
    direction = 0 if difference == 0 else (1 if lower == (predicts == "lower") else -1)
    spread = statistics.pstdev([*a, *b]) if len(a) + len(b) > 1 else 0.0
    # The detectable shift of a Mann–Whitney test, in the pooled spread's units (normal approximation).
    detect = 2.8 * spread * math.sqrt(1 / len(a) + 1 / len(b))
    return Evidence(effect=difference, low=low, high=high, p=test.p, direction=direction, n=f"{len(a)} vs {len(b)}",
                    detectable=f"a difference of about ±{detect:.2g}{unit}",
                    details=f"median {names[0]} {statistics.median(a):.3g}, {names[1]} {statistics.median(b):.3g}",
                    data={names[0]: list(a), names[1]: list(b)}, smallest_arm=min(len(a), len(b)))


def concordance(values: Sequence[np.ndarray]) -> float:
    """Jonckheere's statistic over its number of pairs: P(a value of a later arm > one of an earlier
    arm), ties counted half."""
    above = pairs = 0.0
    for i, earlier in enumerate(values):
        for later in values[i + 1:]:  # comparisons, not differences: inf (never) ties with inf
            above += float((later[None, :] > earlier[:, None]).sum() + 0.5 * (later[None, :] == earlier[:, None]).sum())
            pairs += len(earlier) * len(later)
    return above / pairs


def trend(arms: Sequence[tuple[str, Sequence[Row]]], measurement: str, field: str, predicts: str,
          resamples: int = 2000) -> Evidence:
    """Times over ordered ``arms`` [(name, rows)]; the paper predicts them ``decreasing`` or ``increasing``
    along the order. Effect: the concordance, with a percentile bootstrap interval (each arm resampled)."""
    groups = [event_times(rows, measurement, field) for _, rows in arms]
    values = [np.array(never_as_inf(t, c)) for t, c in groups]
    test = jonckheere(values, alternative="two-sided")
    sizes = [len(v) for v in values]
    effect = concordance(values)
    rng = np.random.default_rng(0)
    replicates = [concordance([v[rng.integers(0, len(v), len(v))] for v in values]) for _ in range(resamples)]
    low, high = np.quantile(replicates, [0.025, 0.975], method="inverted_cdf")
    direction = 0 if effect == 0.5 else (1 if (effect > 0.5) == (predicts == "increasing") else -1)
    return Evidence(effect=effect, low=float(low), high=float(high), p=test.p, direction=direction,
                    n=" / ".join(str(len(rows)) for _, rows in arms),
                    details="KM median " + ", ".join(f"{name} {_median_text(t, c)}"
                                                     for (name, _), (t, c) in zip(arms, groups)),
                    data={name: never_as_inf(t, c) for (name, _), (t, c) in zip(arms, groups)},
                    smallest_arm=min(sizes))


def median_interval(values: Sequence[float], resamples: int = 4000) -> tuple[float, float, float]:
    """(median, low, high): the median of per-run ``values`` with a percentile bootstrap interval
    (numpy's default_rng(0): the same numbers every call)."""
    array = np.array(values, dtype=float)
    rng = np.random.default_rng(0)
    medians = np.median(array[rng.integers(0, len(array), (resamples, len(array)))], axis=1)
    low, high = np.quantile(medians, [0.025, 0.975], method="inverted_cdf")
    return float(np.median(array)), float(low), float(high)


def detectable_share(n: int, p0: float, predicts: str, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The share nearest ``p0`` on the predicted side (a grid of 0.01) that the two-sided exact binomial
    test of ``n`` runs rejects with ``power``; None when none does."""
    rejects = [binomial_test(k, n, p0).p < alpha for k in range(n + 1)]
    grid = [p0 + i / 100 * (1 if predicts == "above" else -1) for i in range(1, 101)]
    for share in (s for s in grid if 0 <= s <= 1):
        if sum(math.comb(n, k) * share**k * (1 - share) ** (n - k) for k in range(n + 1) if rejects[k]) >= power:
            return share
    return None


def rate(hits: Sequence[bool], p0: float, name: str, predicts: str = "above", exact: bool = False) -> Evidence:
    """The share of runs that ``hits``, against ``p0``; the paper predicts it ``above`` (or ``below``).
    ``exact``: the Clopper–Pearson interval instead of Wilson's."""
    k, n = sum(hits), len(hits)
    low, high = clopper_pearson_interval(k, n) if exact else wilson_interval(k, n)
    test = binomial_test(k, n, p0)
    share = k / n if n else math.nan
    direction = 0 if share == p0 else (1 if (share > p0) == (predicts == "above") else -1)
    detect = detectable_share(n, p0, predicts)
    return Evidence(effect=share, low=low, high=high, p=test.p, direction=direction, n=str(n),
                    detectable=None if detect is None else f"a share of {detect:.2f}",
                    details=f"{k}/{n} {name}", data={name: [float(h) for h in hits]})
