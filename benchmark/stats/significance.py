"""Significance tests, bootstrap intervals, multiplicity and power for the pre-registered claims.

The claims compare a handful of seeds per group (8–32), so the tests are exact wherever that is
affordable and say so in ``TestResult.method`` when they are not. Conventions shared by every function:

- ``alternative`` is "two-sided" (the default), "greater" or "less"; each function says which group
  or direction "greater" favours.
- An observed statistic counts as at least as extreme as itself: one-sided p-values are P(T ≥ t) or
  P(T ≤ t), and two-sided ones P(|T − E T| ≥ |t − E T|) unless a function says otherwise (Fisher's
  and the binomial test order outcomes by probability, as R does).
- Values may be ``math.inf``: a censored-at-infinity time (the event never happened within the
  budget). It ranks above every finite value and ties with other infs; NaN is rejected.

Where scipy.stats has the test, it computes it: Fisher's exact test, the exact binomial test and its
exact (Clopper–Pearson) interval, the log-rank test and Mann–Whitney's normal approximation (and the
chi-square tail, which claims/heads.py calls itself). Around them this module keeps the suite's
conventions: argument checks, directions, inf as a censored time, no evidence as p = 1. What scipy
lacks stays here: the exact Cochran–Armitage and Jonckheere–Terpstra tests, Mann–Whitney's exact
null with ties (scipy's exact test assumes none), Holm's adjustment, Mann–Whitney's power, and the
seeded percentile bootstrap (scipy's bootstrap draws other resamples and defaults to BCa intervals:
every shipped interval would move).

Mann–Whitney's two-sided p is P(|U − E U| ≥ |u − E U|), the distance from the null's centre;
scipy's permutation test doubles the smaller tail instead. Without ties U's null is symmetric about
E U and the two agree; with ties it need not be, and they can differ (in 11 of 72 random tied cases
measured for issue 54; in 29 of 72 with 2–6 values a group drawn from 0–3). Why the distance: every
two-sided permutation p here is defined so (Jonckheere's and Cochran–Armitage's too); it orders
outcomes as the normal approximation does, so "auto" moving from exact to normal at large samples
changes the p but not which outcomes count as extreme; it needs no cap at 1; and the shipped
scorecard's p-values were computed with it.

Over 400 lines, on purpose: a claim's test, its interval and the smallest effect its design could
detect are read together in one scorecard row, and each exact test the suite computes itself carries
its enumeration beside its conventions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal, TypeAlias

import numpy as np
from scipy import stats

from emergence_bench.stats.medians import kaplan_meier_medians

Alternative: TypeAlias = Literal["two-sided", "greater", "less"]
Values: TypeAlias = Sequence[float] | np.ndarray
Flags: TypeAlias = Sequence[bool] | np.ndarray

ALTERNATIVES = ("two-sided", "greater", "less")
# Exact enumeration of arrangements up to this many; a seeded Monte Carlo beyond (Jonckheere).
EXACT_LIMIT = 200_000
# Mann–Whitney's exact null is a dynamic programme over (values, group size, rank sum): exact while it
# costs at most this many cell updates (up to about 56 values per group), the normal approximation beyond.
_MANN_WHITNEY_EXACT_COST = 10**8


@dataclass(frozen=True)
class TestResult:
    """A test's outcome: its statistic (each function says which), its p-value, and how p was computed."""

    __test__ = False  # for pytest: a result, not a test class, despite its name

    statistic: float
    p: float
    method: str


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")


def _values(values: Values, name: str) -> np.ndarray:
    """A 1-D float array of the values; NaN (an undefined value, not a censored one) is an error."""
    array = np.asarray(values, dtype=float).reshape(-1)
    if np.isnan(array).any():
        raise ValueError(f"{name} holds NaN")
    return array


def _exact_p(distribution: Iterable[tuple[float, float]], observed: float, mean: float,
             alternative: str, tolerance: float = 0.0) -> float:
    """The p-value of ``observed`` under a discrete null given as (value, weight) pairs (weights need
    not sum to 1: p is the extreme weight over the total). "greater": P(T ≥ t); "less": P(T ≤ t);
    "two-sided": P(|T − mean| ≥ |t − mean|). ``tolerance`` widens each comparison, for float-valued T."""
    extreme = total = 0.0
    for value, weight in distribution:
        total += weight
        if alternative == "greater":
            hit = value >= observed - tolerance
        elif alternative == "less":
            hit = value <= observed + tolerance
        else:
            hit = abs(value - mean) >= abs(observed - mean) - tolerance
        if hit:
            extreme += weight
    return min(1.0, extreme / total)


def _check_count(successes: int, trials: int) -> None:
    if not 0 <= successes <= trials:
        raise ValueError(f"need 0 ≤ successes ≤ trials, got {successes} of {trials}")


# ---- Success rates --------------------------------------------------------------------------------


def fisher_exact(a_success: int, a_n: int, b_success: int, b_n: int,
                 alternative: Alternative = "two-sided") -> TestResult:
    """Fisher's exact test of equal success rates in two groups (a 2×2 table), by scipy.stats.fisher_exact.

    Conditional on both margins, group a's successes X are hypergeometric. "greater": group a's rate
    is higher, p = P(X ≥ a_success); "less": P(X ≤ a_success); "two-sided" (R's definition): the total
    probability of the tables no more probable than the observed one, up to a relative 1e-7.

    statistic: the difference in success rates, a_success/a_n − b_success/b_n. Both groups need trials.
    """
    _check_alternative(alternative)
    _check_count(a_success, a_n)
    _check_count(b_success, b_n)
    if a_n == 0 or b_n == 0:
        raise ValueError("both groups need at least one trial")
    table = [[a_success, a_n - a_success], [b_success, b_n - b_success]]
    p = float(stats.fisher_exact(table, alternative=alternative).pvalue)
    return TestResult(a_success / a_n - b_success / b_n, p, "Fisher exact")


def binomial_test(k: int, n: int, p0: float = 0.5, alternative: Alternative = "two-sided") -> TestResult:
    """Exact binomial test of k successes in n trials against success probability p0, by
    scipy.stats.binomtest.

    "greater": the true probability exceeds p0, p = P(X ≥ k); "less": P(X ≤ k); "two-sided" (R's
    binom.test): the total probability of the outcomes no more probable than k, up to a relative 1e-7.
    statistic: k. With n = 0 there is no evidence: p = 1.
    """
    _check_alternative(alternative)
    _check_count(k, n)
    if not 0.0 <= p0 <= 1.0:
        raise ValueError(f"a probability must lie in [0, 1], not {p0}")
    if n == 0:  # scipy asks for a trial
        return TestResult(0.0, 1.0, "exact binomial")
    p = float(stats.binomtest(k, n, p0, alternative=alternative).pvalue)
    return TestResult(float(k), min(1.0, p), "exact binomial")


def clopper_pearson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of a proportion, k successes in n trials, by
    scipy.stats.binomtest: it inverts the exact binomial test, so it never covers less than ``level``
    (Wilson's can, at a handful of trials). (0, 1) with n = 0."""
    _check_count(k, n)
    if n == 0:
        return 0.0, 1.0
    interval = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(interval.low), float(interval.high)


def sign_test(differences: Values, alternative: Alternative = "two-sided") -> TestResult:
    """Exact sign test that paired differences are centred on zero: the number of positive differences
    among the nonzero ones is Binomial(nonzero, 1/2) under the null. Zeros (ties) are dropped; ±inf
    counts by its sign. "greater": the differences tend to be positive. statistic: the positive count.
    """
    values = _values(differences, "differences")
    positive, negative = int((values > 0).sum()), int((values < 0).sum())
    result = binomial_test(positive, positive + negative, 0.5, alternative)
    return TestResult(float(positive), result.p, "sign test (exact binomial, zeros dropped)")


def trend_test(successes: Sequence[int], trials: Sequence[int], scores: Sequence[float] | None = None,
               alternative: Alternative = "two-sided") -> TestResult:
    """Exact Cochran–Armitage test for a trend in success rates over ordered groups.

    T = Σ scoreᵢ·successesᵢ. Conditional on the total successes S, the successes are multivariate
    hypergeometric: P(s) = Πᵢ C(trialsᵢ, sᵢ) / C(N, S). Its exact distribution comes from a convolution
    over the groups with exact integer weights. "greater": rates increase with the score, p = P(T ≥ t);
    "less": P(T ≤ t); "two-sided": P(|T − E T| ≥ |t − E T|). Float scores compare with a relative 1e-9
    tolerance (integer scores, the default 0, 1, 2, …, are exact and fastest: arbitrary real scores
    make every composition a distinct T).

    statistic: the standardised z = (T − E T)/√Var T under the same conditional null (0 when T cannot
    vary). With two groups and scores (0, 1), the one-sided p is Fisher's one-sided p.
    """
    _check_alternative(alternative)
    if len(successes) != len(trials) or len(trials) < 2:
        raise ValueError("need successes and trials for at least two groups, as many of each")
    for s, n in zip(successes, trials):
        _check_count(s, n)
    weights_of = [float(c) for c in scores] if scores is not None else [float(i) for i in range(len(trials))]
    if len(weights_of) != len(trials):
        raise ValueError("need one score per group")
    total_s, total_n = sum(successes), sum(trials)
    scale = max(1.0, sum(abs(c) * n for c, n in zip(weights_of, trials)))
    tolerance, digits = 1e-9 * scale, 12 - max(0, int(math.log10(scale)))

    # {(successes so far, T so far): the number of ways}; a state that cannot reach S is dropped.
    states: dict[tuple[int, float], int] = {(0, 0.0): 1}
    capacity_left = total_n
    for score, n in zip(weights_of, trials):
        capacity_left -= n
        new: dict[tuple[int, float], int] = {}
        for (used, t), ways in states.items():
            for j in range(max(0, total_s - used - capacity_left), min(n, total_s - used) + 1):
                key = (used + j, round(t + score * j, digits))  # one key for equal sums reached two ways
                new[key] = new.get(key, 0) + ways * math.comb(n, j)
        states = new

    observed = sum(c * s for c, s in zip(weights_of, successes))
    mean = total_s / total_n * sum(c * n for c, n in zip(weights_of, trials)) if total_n else 0.0
    distribution = [(t, float(ways)) for (_, t), ways in states.items()]
    p = _exact_p(distribution, observed, mean, alternative, tolerance)
    first = sum(n * c for c, n in zip(weights_of, trials))
    spread = total_n * sum(n * c * c for c, n in zip(weights_of, trials)) - first * first
    variance = total_s * (total_n - total_s) * spread / (total_n**2 * (total_n - 1)) if total_n > 1 else 0.0
    z = (observed - mean) / math.sqrt(variance) if variance > 1e-12 * scale * scale else 0.0
    return TestResult(z, p, "exact Cochran–Armitage (conditional)")


# ---- Ranks and times ------------------------------------------------------------------------------


def _doubled_midranks(pooled: np.ndarray) -> np.ndarray:
    """Twice each value's mid-rank in the pooled sample, as integers: a block of t tied values starting
    at 0-based sorted position s has mid-rank s + (t + 1)/2. inf ranks last and ties with inf."""
    _, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return np.asarray((2 * starts + counts + 1)[inverse.reshape(-1)], dtype=np.int64)


def _rank_sum_counts(doubled_ranks: np.ndarray, k: int) -> np.ndarray:
    """counts[s]: how many of the C(N, k) k-subsets of the pooled values have doubled rank sum s — the
    exact null of a rank-sum statistic with ties (every split equally likely), as a subset-sum dynamic
    programme over the values. Float counts: exact to 2⁵³ and ample beyond. [top + 1]."""
    top = int(np.sort(doubled_ranks)[len(doubled_ranks) - k:].sum())
    counts = np.zeros((k + 1, top + 1))
    counts[0, 0] = 1.0
    for rank in doubled_ranks.tolist():
        # Include this value in a subset (row j−1 → j, sum shifted by its rank) or not.
        counts[1:, rank:] = counts[1:, rank:] + counts[:-1, : top + 1 - rank]
    return counts[k]


def mann_whitney(x: Values, y: Values, alternative: Alternative = "two-sided",
                 method: Literal["auto", "exact", "normal"] = "auto") -> TestResult:
    """Mann–Whitney U test (Wilcoxon rank-sum) of x against y.

    statistic: U of x = #{(i, j): xᵢ > yⱼ} + ½·#{xᵢ = yⱼ} (ties count a half; inf ties with inf).
    "greater": x tends to be larger, p = P(U ≥ u); "less": P(U ≤ u); "two-sided": P(|U − nm/2| ≥ |u − nm/2|).

    method "exact": the permutation null over all C(n + m, n) splits of the pooled mid-ranks, ties
    included, counted by a dynamic programme rather than listed. "normal": scipy.stats.mannwhitneyu's
    normal approximation, with the tie-corrected variance nm/12·(N + 1 − Σ(t³ − t)/(N(N − 1))) and a
    continuity correction of ½ (p = 1 when every value ties). "auto" (default): exact unless its
    programme is large (beyond about 56 values per group). The exact null with ties is the suite's own:
    scipy's exact test assumes no ties.
    """
    _check_alternative(alternative)
    xs, ys = _values(x, "x"), _values(y, "y")
    n, m = len(xs), len(ys)
    if n == 0 or m == 0:
        raise ValueError("both samples need at least one value")
    pooled = np.concatenate([xs, ys])
    total = n + m
    ranks = _doubled_midranks(pooled)
    doubled_u = int(ranks[:n].sum()) - n * (n + 1)  # 2U = 2·(rank sum of x) − n(n + 1)
    small = min(n, m)
    if method == "auto":
        method = "exact" if total * (small + 1) * (2 * small * total + 1) <= _MANN_WHITNEY_EXACT_COST else "normal"

    if method == "exact":
        counts = _rank_sum_counts(ranks, small)
        sums = np.arange(len(counts))
        # The programme runs over the smaller group; x's rank sum is the rest when y is the smaller.
        doubled = sums - n * (n + 1) if n <= m else total * (total + 1) - sums - n * (n + 1)
        support = np.flatnonzero(counts)
        p = _exact_p(zip(doubled[support].tolist(), counts[support].tolist()), doubled_u, n * m, alternative)
        return TestResult(doubled_u / 2, p, "exact")
    if method != "normal":
        raise ValueError(f"method must be 'auto', 'exact' or 'normal', not {method!r}")

    p = float(stats.mannwhitneyu(xs, ys, alternative=alternative, method="asymptotic", use_continuity=True).pvalue)
    return TestResult(doubled_u / 2, p, "normal approximation (tie- and continuity-corrected)")


def logrank(times_a: Values, censored_a: Flags, times_b: Values, censored_b: Flags,
            alternative: Alternative = "two-sided") -> TestResult:
    """Two-sample log-rank test of equal survival (time-to-event) curves, right-censored data, by
    scipy.stats.logrank.

    At each distinct event time the expected events of group a are its share of those at risk (a
    censoring at that time is still at risk); O − E sums a's observed minus expected events and V their
    hypergeometric variance. statistic: the signed z = (O − E)/√V, positive when group a has more events
    than expected (its events come earlier). "two-sided": the chi-square test of z² with 1 df; "less":
    a's times are shorter, p = P(Z ≥ z); "greater": a's times are longer, p = P(Z ≤ z). A censored time
    may be inf; an event time must be finite. No events, or nothing that could differ (V = 0): z = 0, p = 1.
    """
    _check_alternative(alternative)
    a, b = _values(times_a, "times_a"), _values(times_b, "times_b")
    flags_a, flags_b = np.asarray(censored_a, dtype=bool).reshape(-1), np.asarray(censored_b, dtype=bool).reshape(-1)
    if len(flags_a) != len(a) or len(flags_b) != len(b):
        raise ValueError("need one censoring flag per time")
    times, censored = np.concatenate([a, b]), np.concatenate([flags_a, flags_b])
    if not np.isfinite(times[~censored]).all():
        raise ValueError("an event time must be finite (censor a time that never happened)")
    # scipy takes finite times only: a time censored at inf is at risk at every event, as is one
    # censored just after the last time.
    finite = times[np.isfinite(times)]
    times = np.where(np.isposinf(times), (finite.max() if len(finite) else 0.0) + 1.0, times)
    a, b = times[:len(a)], times[len(a):]
    # scipy's alternatives name a's hazard (its "less": a's events come later); ours name a's times.
    hazard = {"two-sided": "two-sided", "less": "greater", "greater": "less"}[alternative]
    with np.errstate(divide="ignore", invalid="ignore"):  # V = 0 gives 0/0: no evidence
        result = stats.logrank(stats.CensoredData.right_censored(a, flags_a),
                               stats.CensoredData.right_censored(b, flags_b), alternative=hazard)
    z, p = float(result.statistic), float(result.pvalue)
    if math.isnan(z):
        return TestResult(0.0, 1.0, "log-rank")
    return TestResult(z, p, "log-rank")


def _arrangements(sizes: Sequence[int]) -> np.ndarray:
    """Every distinct assignment of group labels 0..k−1 to the N pooled positions with these group
    sizes, one per row: [N! / Π sizesᵢ!, N]. Built group by group: each row's free positions, times
    each way of choosing the next group's among them."""
    total = sum(sizes)
    rows = np.full((1, total), len(sizes) - 1, dtype=np.int64)  # the last group takes what is left
    free = np.arange(total, dtype=np.intp)[None, :]  # [rows, still unassigned positions]
    for group, size in enumerate(sizes[:-1]):
        slots = free.shape[1]
        chosen_list = list(itertools.combinations(range(slots), size))
        chosen = np.array(chosen_list, dtype=np.intp).reshape(len(chosen_list), size)
        left = np.array([[i for i in range(slots) if i not in combo] for combo in chosen_list],
                        dtype=np.intp).reshape(len(chosen_list), slots - size)
        free = np.repeat(free, len(chosen), axis=0)
        rows = np.repeat(rows, len(chosen), axis=0)
        picks, remaining = np.tile(chosen, (len(rows) // len(chosen), 1)), np.tile(left, (len(rows) // len(chosen), 1))
        np.put_along_axis(rows, np.take_along_axis(free, picks, axis=1), group, axis=1)
        free = np.take_along_axis(free, remaining, axis=1)
    return rows


def _doubled_jonckheere(labels: np.ndarray, values: np.ndarray) -> np.ndarray:
    """2·JT for each row of ``labels`` [A, N] (each pooled value's group) over ``values`` [N] -> [A] ints.
    JT counts the pairs (x in an earlier group, y in a later one) with x < y, ties counting ½."""
    order = np.argsort(values, kind="stable")
    values, labels = values[order], labels[:, order]
    doubled = np.zeros(len(labels), dtype=np.int64)
    for i in range(len(values) - 1):
        later, tie = labels[:, i + 1:], values[i + 1:] == values[i]  # sorted: every later value is ≥ values[i]
        # Earlier group first: it holds the smaller value (2) or a tie (1). Later group first: only a tie counts.
        doubled += ((labels[:, i:i + 1] < later) * np.where(tie, 1, 2) + (labels[:, i:i + 1] > later) * tie).sum(axis=1)
    return doubled


def jonckheere(groups: Sequence[Values], alternative: Alternative = "two-sided",
               exact_limit: int = EXACT_LIMIT, permutations: int = 20_000, seed: int = 0) -> TestResult:
    """Jonckheere–Terpstra test for a trend across ordered groups of values (inf allowed).

    statistic: JT = Σ over group pairs i < j of #{(x in i, y in j): x < y} + ½·#{x = y}.
    "greater": values increase with the group order, p = P(JT ≥ jt); "less": P(JT ≤ jt); "two-sided":
    P(|JT − E JT| ≥ |jt − E JT|), E JT = Σ_{i<j} nᵢnⱼ / 2. The null is the permutation one (every
    assignment of the pooled values to groups of these sizes equally likely; ties exact): enumerated
    when there are at most ``exact_limit`` assignments, else ``permutations`` Monte Carlo assignments
    from numpy's default_rng(seed), p = (1 + #at least as extreme)/(1 + permutations).
    """
    _check_alternative(alternative)
    arrays = [_values(group, f"groups[{i}]") for i, group in enumerate(groups)]
    if len(arrays) < 2 or any(len(a) == 0 for a in arrays):
        raise ValueError("need at least two groups, none empty")
    sizes = [len(a) for a in arrays]
    pooled = np.concatenate(arrays)
    labels = np.repeat(np.arange(len(sizes)), sizes)
    observed = int(_doubled_jonckheere(labels[None, :], pooled)[0])
    doubled_mean = sum(a * b for a, b in itertools.combinations(sizes, 2))  # 2·E JT
    count = math.factorial(len(pooled))
    for size in sizes:
        count //= math.factorial(size)

    if count <= exact_limit:
        values, counts = np.unique(_doubled_jonckheere(_arrangements(sizes), pooled), return_counts=True)
        p = _exact_p(zip(values.tolist(), counts.tolist()), observed, doubled_mean, alternative)
        return TestResult(observed / 2, p, "exact permutation")
    rng = np.random.default_rng(seed)
    null = _doubled_jonckheere(rng.permuted(np.tile(labels, (permutations, 1)), axis=1), pooled)
    if alternative == "greater":
        extreme = int((null >= observed).sum())
    elif alternative == "less":
        extreme = int((null <= observed).sum())
    else:
        extreme = int((np.abs(null - doubled_mean) >= abs(observed - doubled_mean)).sum())
    return TestResult(observed / 2, (1 + extreme) / (1 + permutations), f"Monte Carlo permutation ({permutations})")


# ---- Bootstrap intervals --------------------------------------------------------------------------


def _bootstrap(values: np.ndarray, censored: np.ndarray | None, statistic: str, n: int,
               rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """(the statistic of the sample, of each of n resamples with replacement [n]). With censoring flags
    the statistic is the Kaplan–Meier median (inf where not reached)."""
    if len(values) == 0:
        raise ValueError("cannot bootstrap an empty sample")
    index = rng.integers(0, len(values), size=(n, len(values)))
    if censored is not None:
        estimate = float(kaplan_meier_medians(values[None, :], censored[None, :])[0])
        return estimate, kaplan_meier_medians(values[index], censored[index])
    if statistic == "median":
        return float(np.median(values)), np.median(values[index], axis=1)
    return float(np.mean(values)), np.mean(values[index], axis=1)


def _bootstrap_both(a: Values, b: Values, censored_a: Flags | None, censored_b: Flags | None,
                    statistic: str, n: int, seed: int) -> tuple[float, np.ndarray, float, np.ndarray]:
    """Both groups' estimates and resampled statistics, a's resamples drawn first from default_rng(seed)."""
    if statistic not in ("median", "mean"):
        raise ValueError(f"statistic must be 'median' or 'mean', not {statistic!r}")
    xs, ys = _values(a, "a"), _values(b, "b")
    flags_a = flags_b = None
    if censored_a is not None or censored_b is not None:
        if statistic != "median":
            raise ValueError("with censoring only the (Kaplan–Meier) median is defined")
        # Both groups then use the KM median (the lower middle value without censoring), for one convention.
        flags_a = np.zeros(len(xs), bool) if censored_a is None else np.asarray(censored_a, dtype=bool).reshape(-1)
        flags_b = np.zeros(len(ys), bool) if censored_b is None else np.asarray(censored_b, dtype=bool).reshape(-1)
        if len(flags_a) != len(xs) or len(flags_b) != len(ys):
            raise ValueError("need one censoring flag per value")
    rng = np.random.default_rng(seed)
    estimate_a, replicates_a = _bootstrap(xs, flags_a, statistic, n, rng)
    estimate_b, replicates_b = _bootstrap(ys, flags_b, statistic, n, rng)
    return estimate_a, replicates_a, estimate_b, replicates_b


def _percentile_interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile interval's ends: empirical quantiles that are replicate values themselves
    ("inverted_cdf"), since interpolating between inf and a finite value is meaningless. NaN replicates
    make both ends NaN."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), not {level}")
    low, high = np.quantile(replicates, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return float(low), float(high)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator with the conventions of censored medians: inf over anything is inf
    (not reached stays not reached), finite over inf is 0, x > 0 over 0 is inf, 0/0 is NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isinf(numerator), np.inf, numerator / denominator)


def bootstrap_ratio(a: Values, b: Values, censored_a: Flags | None = None, censored_b: Flags | None = None,
                    statistic: Literal["median", "mean"] = "median", n: int = 4000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high): a's statistic over b's, with a percentile bootstrap interval at ``level``.

    Each group is resampled independently with replacement, ``n`` times, from numpy's
    default_rng(seed) (a's draws first): deterministic given the seed. statistic "median" or "mean"
    (np.median: the middle pair's average for even sizes). When either group has censoring flags, both
    use the Kaplan–Meier median (inf when not reached) and "mean" is an error. Ratio conventions: inf
    over anything is inf, finite over inf is 0, x > 0 over 0 is inf, 0/0 is NaN; the interval's ends
    are replicate values (so an end may be inf).
    """
    estimate_a, replicates_a, estimate_b, replicates_b = _bootstrap_both(a, b, censored_a, censored_b,
                                                                         statistic, n, seed)
    estimate = float(_ratio(np.array(estimate_a), np.array(estimate_b)))
    return (estimate, *_percentile_interval(_ratio(replicates_a, replicates_b), level))


def bootstrap_difference(a: Values, b: Values, censored_a: Flags | None = None, censored_b: Flags | None = None,
                         statistic: Literal["median", "mean"] = "median", n: int = 4000, seed: int = 0,
                         level: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high): a's statistic minus b's (e.g. final losses), with a percentile bootstrap
    interval, resampled exactly as ``bootstrap_ratio`` resamples (same seed, same draws). With censoring
    an infinite median makes the difference ±inf, and inf − inf is NaN (then so is the interval).
    """
    estimate_a, replicates_a, estimate_b, replicates_b = _bootstrap_both(a, b, censored_a, censored_b,
                                                                         statistic, n, seed)
    with np.errstate(invalid="ignore"):
        estimate, replicates = estimate_a - estimate_b, replicates_a - replicates_b
    return (float(estimate), *_percentile_interval(replicates, level))


# ---- Multiplicity and power -----------------------------------------------------------------------


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values, in the input order: the i-th smallest of the m tested p's
    becomes max over j ≤ i of min(1, (m − j + 1)·p₍ⱼ₎) (monotone in p, capped at 1). None (a claim
    not tested) passes through as None and does not count in m. Tied p's get equal adjusted values.
    """
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    if any(math.isnan(p) or not 0 <= p <= 1 for p, _ in tested):
        raise ValueError("p-values must lie in [0, 1]")
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


# Gauss–Hermite nodes and weights for E f(Z), Z standard normal (probabilists' Hermite, 80 points).
_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(80)
_HERMITE_WEIGHTS = _HERMITE_WEIGHTS / _HERMITE_WEIGHTS.sum()


def mann_whitney_power(n_a: int, n_b: int, ratio: float, alpha: float = 0.05) -> float:
    """The power of a two-sided Mann–Whitney test at ``alpha`` when a's times are b's times scaled by
    ``ratio``, assuming log-normal times with a log-sd of 1 in both groups (log X ~ N(log ratio, 1),
    log Y ~ N(0, 1)) and the normal approximation to U under both hypotheses (Lehmann's):

    θ = P(X > Y) = Φ(δ/√2), δ = log ratio; q = P(X > Y, X > Y′) = P(X > Y, X′ > Y) = E Φ(Z + δ)²
    (Gauss–Hermite); Var₁ U = n_a·n_b·[θ(1 − θ) + (N − 2)(q − θ²)], Var₀ U = n_a·n_b·(N + 1)/12; power =
    Φ((n_a·n_b·(θ − ½) − z₁₋α/₂·√Var₀)/√Var₁) plus the same for the other tail. At δ = 0 it is alpha.
    Against simulation of the exact test at 8–32 per group it is within a few points.
    """
    normal, delta = NormalDist(), math.log(ratio)
    theta = normal.cdf(delta / math.sqrt(2))
    q = sum(weight * normal.cdf(node + delta) ** 2
            for node, weight in zip(_HERMITE_NODES.tolist(), _HERMITE_WEIGHTS.tolist()))
    pairs, total = n_a * n_b, n_a + n_b
    null_sd = math.sqrt(pairs * (total + 1) / 12)
    sd = math.sqrt(max(pairs * (theta * (1 - theta) + (total - 2) * (q - theta * theta)), 1e-300))
    critical, shift = normal.inv_cdf(1 - alpha / 2) * null_sd, pairs * (theta - 0.5)
    return normal.cdf((shift - critical) / sd) + normal.cdf((-shift - critical) / sd)


def detectable_shift_ratio(n_a: int, n_b: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest ratio r > 1 of median times (a's over b's) that a two-sided Mann–Whitney test at
    these sizes detects with ``power``, under ``mann_whitney_power``'s assumptions: log-normal times
    with a log-sd of 1 in both groups, and the normal approximation to U. Found by bisection on log r
    (power rises with r) to a relative 1e-9. None when the exact test cannot reach alpha at all (its
    smallest two-sided p, 2/C(N, n_a), exceeds alpha: 3 per group) or even r = e²⁰ falls short.
    Times that spread more than a factor e per log-sd need a larger ratio than this.
    """
    low, high = 0.0, 20.0
    if 2 / math.comb(n_a + n_b, n_a) > alpha or mann_whitney_power(n_a, n_b, math.exp(high), alpha) < power:
        return None
    while high - low > 1e-9:
        middle = (low + high) / 2
        low, high = (low, middle) if mann_whitney_power(n_a, n_b, math.exp(middle), alpha) >= power else (middle, high)
    return math.exp(high)
