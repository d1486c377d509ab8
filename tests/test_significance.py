"""The significance tests against references computed independently: brute-force enumeration of every
table, split or permutation on small constructed data, published values, hand computations written
out step by step, and scipy.stats as the oracle for the tests the suite computes itself (Mann–Whitney's
exact null, Jonckheere, Cochran–Armitage). Fisher, the binomial test and the log-rank test are
scipy's: their tests here hold the suite's conventions around them (directions, inf, no evidence)."""

import itertools
import math
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats

from emergence_bench.stats import significance as sig
from emergence_bench.stats.medians import kaplan_meier_median

INF = math.inf


def p_from(outcomes, observed, mean, alternative):
    """The p-value by definition over (value, probability) outcomes listed in full (exact Fractions)."""
    if alternative == "greater":
        return sum(w for v, w in outcomes if v >= observed)
    if alternative == "less":
        return sum(w for v, w in outcomes if v <= observed)
    return sum(w for v, w in outcomes if abs(v - mean) >= abs(observed - mean))


# ---- Fisher ---------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def brute_fisher(a_success, a_n, b_success, b_n, alternative="two-sided"):
    """Fisher's p from first principles: with N subjects and K successes, every choice of which K
    subjects succeed is equally likely; count the choices by how many successes land in group a."""
    total, successes = a_n + b_n, a_success + b_success
    tally = {}
    for chosen in itertools.combinations(range(total), successes):
        x = sum(1 for i in chosen if i < a_n)  # subjects 0..a_n−1 are group a
        tally[x] = tally.get(x, 0) + 1
    everything = sum(tally.values())
    probability = {x: Fraction(c, everything) for x, c in tally.items()}
    if alternative == "greater":
        return float(sum(p for x, p in probability.items() if x >= a_success))
    if alternative == "less":
        return float(sum(p for x, p in probability.items() if x <= a_success))
    return float(sum(p for p in probability.values() if p <= probability[a_success]))


@pytest.mark.parametrize("a_n,b_n", [(4, 4), (5, 7), (8, 6), (3, 9)])
def test_fisher_matches_enumerating_who_succeeds(a_n, b_n):
    for a_success in range(a_n + 1):
        for b_success in range(b_n + 1):
            for alternative in sig.ALTERNATIVES:
                got = sig.fisher_exact(a_success, a_n, b_success, b_n, alternative)
                assert got.p == pytest.approx(brute_fisher(a_success, a_n, b_success, b_n, alternative), rel=1e-12)
                assert got.statistic == pytest.approx(a_success / a_n - b_success / b_n)


def test_fisher_published_values():
    # The lady tasting tea (Fisher 1935): 3 of 4 cups right against 1 of 4: one-sided 17/70.
    assert sig.fisher_exact(3, 4, 1, 4, "greater").p == pytest.approx(17 / 70, rel=1e-12)
    assert sig.fisher_exact(3, 4, 1, 4).p == pytest.approx(34 / 70, rel=1e-12)
    # R: fisher.test(matrix(c(3, 7, 8, 2), 2))$p.value = 0.06977852 (tables no more probable than observed).
    assert sig.fisher_exact(3, 10, 8, 10).p == pytest.approx(0.06977852, abs=1e-8)
    # "greater" favours group a, "less" group b.
    assert sig.fisher_exact(9, 10, 2, 10, "greater").p < 0.01 < 0.99 < sig.fisher_exact(9, 10, 2, 10, "less").p


def test_fisher_rejects_impossible_tables():
    with pytest.raises(ValueError):
        sig.fisher_exact(5, 4, 1, 4)
    with pytest.raises(ValueError):
        sig.fisher_exact(0, 0, 1, 4)
    with pytest.raises(ValueError):
        sig.fisher_exact(1, 4, 1, 4, alternative="bigger")


# ---- Binomial and sign tests ----------------------------------------------------------------------


def test_binomial_test_against_exact_fractions():
    for n, p0 in [(10, Fraction(1, 2)), (12, Fraction(1, 3)), (7, Fraction(9, 10))]:
        pmf = {j: math.comb(n, j) * p0**j * (1 - p0) ** (n - j) for j in range(n + 1)}
        for k in range(n + 1):
            expected = {"greater": sum(pmf[j] for j in range(k, n + 1)),
                        "less": sum(pmf[j] for j in range(k + 1)),
                        "two-sided": min(1, sum(q for q in pmf.values() if q <= pmf[k]))}
            for alternative, value in expected.items():
                assert sig.binomial_test(k, n, float(p0), alternative).p == pytest.approx(float(value), rel=1e-9)
    # R: binom.test(3, 10)$p.value = 0.34375.
    assert sig.binomial_test(3, 10).p == pytest.approx(0.34375, rel=1e-12)
    assert sig.binomial_test(0, 0).p == 1.0


def test_sign_test_drops_zeros_and_counts_inf_by_sign():
    # Nonzero: +1, +2, +inf, +0.5, −3 (the two zeros are dropped): 4 of 5 positive.
    result = sig.sign_test([1, 0, 2, INF, -3, 0, 0.5], "greater")
    assert result.statistic == 4
    assert result.p == pytest.approx((5 + 1) / 32, rel=1e-12)  # P(X ≥ 4), X ~ Binomial(5, ½)
    assert sig.sign_test([1, 0, 2, INF, -3, 0, 0.5]).p == pytest.approx(12 / 32, rel=1e-12)
    with pytest.raises(ValueError):
        sig.sign_test([1.0, math.nan])


# ---- Mann–Whitney ---------------------------------------------------------------------------------


def u_of(x, y):
    """U of x by its definition: pairs with x above y, ties a half."""
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)


def brute_mann_whitney(x, y, alternative):
    pooled, n = list(x) + list(y), len(x)
    splits = list(itertools.combinations(range(len(pooled)), n))
    outcomes = []
    for chosen in splits:
        rest = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        outcomes.append((u_of([pooled[i] for i in chosen], rest), Fraction(1, len(splits))))
    return float(p_from(outcomes, u_of(x, y), len(x) * len(y) / 2, alternative))


@pytest.mark.parametrize("x,y", [
    ([1.0, 2.0, 2.0, INF], [2.0, 3.0, INF, INF, 0.5]),        # ties, including ties at inf
    ([5.0, 5.0, 5.0, 1.0, 7.0, 7.0], [5.0, 7.0, 2.0]),         # x the larger group
    ([0.3, 1.7, 2.2, 4.0, 9.0], [0.1, 0.2, 2.5, 3.3, 3.4]),    # no ties
    ([INF, INF, INF], [INF, 3.0, INF, 1.0]),                    # mostly censored
])
def test_mann_whitney_exact_matches_enumerating_every_split(x, y):
    for alternative in sig.ALTERNATIVES:
        result = sig.mann_whitney(x, y, alternative)
        assert result.method == "exact"
        assert result.statistic == u_of(x, y)
        assert result.p == pytest.approx(brute_mann_whitney(x, y, alternative), rel=1e-12)
        # Swapping the samples mirrors the alternative.
        mirror = {"greater": "less", "less": "greater", "two-sided": "two-sided"}[alternative]
        assert sig.mann_whitney(y, x, mirror).p == pytest.approx(result.p, rel=1e-12)


def u_statistic(x, y, axis=-1):
    """U of x, vectorised over leading axes (scipy's permutation_test calls it on batches)."""
    x, y = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
    return ((x[..., :, None] > y[..., None, :]) + 0.5 * (x[..., :, None] == y[..., None, :])).sum(axis=(-2, -1))


def scipy_permutation_p(samples, statistic, alternative):
    """scipy's exact permutation p (every assignment of the pooled values to the samples)."""
    return stats.permutation_test(samples, statistic, permutation_type="independent", n_resamples=np.inf,
                                  vectorized=True, alternative=alternative).pvalue


def test_mann_whitney_textbook_values():
    # 3 against 3, complete separation: the 1 most extreme of C(6, 3) = 20 splits per tail.
    assert sig.mann_whitney([1, 2, 3], [4, 5, 6], "less").p == pytest.approx(1 / 20, rel=1e-12)
    assert sig.mann_whitney([1, 2, 3], [4, 5, 6]).p == pytest.approx(1 / 10, rel=1e-12)
    # 8 against 8: the tables' two-sided 5% critical value is U = 13 (P(U ≤ 13) ≤ 0.025 < P(U ≤ 14)).
    def split(x_ranks):
        return [float(r) for r in x_ranks], [float(r) for r in range(1, 17) if r not in x_ranks]

    at_13, at_14 = split([1, 2, 3, 4, 5, 6, 12, 16]), split([1, 2, 3, 4, 5, 6, 13, 16])  # rank sums 49, 50
    result = sig.mann_whitney(*at_13, "less")
    assert result.statistic == 13 and sig.mann_whitney(*at_14, "less").statistic == 14
    assert result.p <= 0.025 < sig.mann_whitney(*at_14, "less").p
    assert sig.mann_whitney(*at_13).p == pytest.approx(2 * result.p, rel=1e-12)


@pytest.mark.parametrize("n,m,seed", [(8, 8, 0), (16, 16, 1), (32, 32, 5), (5, 27, 3)])
def test_mann_whitney_exact_without_ties_against_scipy(n, m, seed):
    # Without ties U's null is symmetric about nm/2, so scipy's two-sided p (twice the smaller tail) is ours.
    rng = np.random.default_rng(seed)
    x, y = rng.normal(0.4, 1, n), rng.normal(0, 1, m)
    for alternative in sig.ALTERNATIVES:
        result = sig.mann_whitney(x, y, alternative)
        oracle = stats.mannwhitneyu(x, y, alternative=alternative, method="exact")
        assert result.method == "exact" and result.statistic == oracle.statistic == u_of(x, y)
        assert result.p == pytest.approx(oracle.pvalue, rel=1e-9)


def test_mann_whitney_with_ties_against_scipys_permutation_test():
    # One-sided p's are scipy's exact permutation p's. The two-sided convention differs with ties:
    # ours is P(|U − E U| ≥ |u − E U|), scipy's twice the smaller tail (the module docstring says why).
    x, y = [0.0, 1.0, 1.0, 3.0], [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    for alternative in ("greater", "less"):
        assert sig.mann_whitney(x, y, alternative).p == pytest.approx(
            scipy_permutation_p((x, y), u_statistic, alternative), rel=1e-12)
    ours = sig.mann_whitney(x, y).p
    assert ours == pytest.approx(brute_mann_whitney(x, y, "two-sided"), rel=1e-12)
    assert ours != pytest.approx(scipy_permutation_p((x, y), u_statistic, "two-sided"), rel=1e-3)
    rng = np.random.default_rng(4)
    for _ in range(20):
        x, y = rng.integers(0, 4, 5).astype(float), rng.integers(0, 4, 6).astype(float)
        for alternative in ("greater", "less"):
            assert sig.mann_whitney(x, y, alternative).p == pytest.approx(
                scipy_permutation_p((x, y), u_statistic, alternative), rel=1e-12)


def test_mann_whitney_normal_approximation():
    # By hand: x = [1, 2, 2], y = [2, 3, 4, 4]; pooled ties: 2 ×3, 4 ×2 → Σ(t³ − t) = 24 + 6 = 30.
    # U = ½ + ½ (each x = 2 ties the y = 2; no x is above any y) = 1; E U = 6.
    x, y = [1.0, 2.0, 2.0], [2.0, 3.0, 4.0, 4.0]
    u = u_of(x, y)
    variance = 3 * 4 / 12 * (8 - 30 / (7 * 6))
    expected = 2 * (1 - NormalDist().cdf((abs(u - 6) - 0.5) / math.sqrt(variance)))
    result = sig.mann_whitney(x, y, method="normal")
    assert result.statistic == u == 1.0
    assert result.p == pytest.approx(expected, rel=1e-12)
    # inf ranks above every finite value: as 1e9 would here.
    assert sig.mann_whitney([1.0, INF, 2.0], [2.0, 3.0, INF, 4.0], method="normal").p == pytest.approx(
        stats.mannwhitneyu([1.0, 1e9, 2.0], [2.0, 3.0, 1e9, 4.0], method="asymptotic").pvalue, rel=1e-12)
    # At 30 per group with continuous values it is close to the exact p.
    rng = np.random.default_rng(2)
    a, b = rng.normal(0.5, 1, 30), rng.normal(0, 1, 30)
    for alternative in sig.ALTERNATIVES:
        exact, normal = sig.mann_whitney(a, b, alternative), sig.mann_whitney(a, b, alternative, method="normal")
        assert normal.p == pytest.approx(exact.p, abs=0.005)
    # Everything tied: no evidence.
    assert sig.mann_whitney([INF, INF], [INF, INF, INF], method="normal").p == 1.0


def test_mann_whitney_rejects_nan_and_empty():
    with pytest.raises(ValueError):
        sig.mann_whitney([1.0, math.nan], [2.0])
    with pytest.raises(ValueError):
        sig.mann_whitney([], [2.0])


# ---- Log-rank -------------------------------------------------------------------------------------


def test_logrank_hand_computed():
    # a: 2, 4, 4, 6+ ; b: 1, 3+, 4, 5, 7+ ("+" censored). At each event time (n at risk, nₐ, d, dₐ):
    # t=1: (9, 4, 1, 0)  E = 4/9   V = 1·(4/9)(5/9)·8/8 = 20/81
    # t=2: (8, 4, 1, 1)  E = 1/2   V = 1·(1/2)(1/2)·7/7 = 1/4
    # t=4: (6, 3, 3, 2)  E = 3/2   V = 3·(1/2)(1/2)·3/5 = 9/20   (3+ left the risk set before 4)
    # t=5: (3, 1, 1, 0)  E = 1/3   V = 1·(1/3)(2/3)·2/2 = 2/9
    observed = 3
    expected = Fraction(4, 9) + Fraction(1, 2) + Fraction(3, 2) + Fraction(1, 3)
    variance = Fraction(20, 81) + Fraction(1, 4) + Fraction(9, 20) + Fraction(2, 9)
    assert expected == Fraction(25, 9) and variance == Fraction(947, 810)
    z = float(observed - expected) / math.sqrt(variance)
    result = sig.logrank([2, 4, 4, 6], [False, False, False, True], [1, 3, 4, 5, 7], [False, True, False, False, True])
    assert result.statistic == pytest.approx(z, rel=1e-12)
    assert result.p == pytest.approx(2 * (1 - NormalDist().cdf(z)), rel=1e-9)
    assert sig.logrank([2, 4, 4, 6], [0, 0, 0, 1], [1, 3, 4, 5, 7], [0, 1, 0, 0, 1], "less").p == \
        pytest.approx(1 - NormalDist().cdf(z), rel=1e-9)


def test_logrank_counts_a_censoring_at_an_event_time_as_still_at_risk():
    # a dies at 3, b is censored at 3: both at risk then (n = 2, nₐ = 1, d = 1): E = ½, V = ¼, z = 1.
    result = sig.logrank([3], [False], [3], [True])
    assert result.statistic == pytest.approx(1.0, rel=1e-12)
    assert result.p == pytest.approx(2 * (1 - NormalDist().cdf(1.0)), rel=1e-9)


def test_logrank_freireich_leukaemia():
    # Freireich et al. (1963) remission times, 6-MP against placebo: the log-rank chi-square is 16.79
    # (Kleinbaum & Klein, Survival Analysis; R survdiff: Chisq = 16.8, p = 4e-05), E(6-MP) = 19.25.
    mp = [6, 6, 6, 7, 10, 13, 16, 22, 23, 6, 9, 10, 11, 17, 19, 20, 25, 32, 32, 34, 35]
    mp_censored = [False] * 9 + [True] * 12
    placebo = [1, 1, 2, 2, 3, 4, 4, 5, 5, 8, 8, 8, 8, 11, 11, 12, 12, 15, 17, 22, 23]
    result = sig.logrank(mp, mp_censored, placebo, [False] * 21)
    assert result.statistic ** 2 == pytest.approx(16.79, abs=0.005)
    assert result.statistic < 0  # 6-MP: fewer events than expected (9 against 19.25)
    assert result.p == pytest.approx(4.17e-5, rel=0.01)
    assert sig.logrank(mp, mp_censored, placebo, [False] * 21, "greater").p == pytest.approx(result.p / 2, rel=1e-9)
    # Censored at inf (never happened within the budget) acts as censored after every event.
    far = [INF if c else t for t, c in zip(mp, mp_censored)]
    late = [t if not c else 100 for t, c in zip(mp, mp_censored)]
    assert sig.logrank(far, mp_censored, placebo, [False] * 21).statistic == \
        pytest.approx(sig.logrank(late, mp_censored, placebo, [False] * 21).statistic, rel=1e-12)


def test_logrank_direction_and_degenerate_cases():
    early, late = [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]
    result = sig.logrank(early, [False] * 6, late, [False] * 6, "less")
    assert result.statistic > 0 and result.p < 0.01
    assert sig.logrank(early, [False] * 6, late, [False] * 6, "greater").p > 0.99
    assert sig.logrank([INF, INF], [True, True], [INF], [True]) == sig.TestResult(0.0, 1.0, "log-rank")
    with pytest.raises(ValueError):
        sig.logrank([INF], [False], [1], [False])


# ---- Trend tests ----------------------------------------------------------------------------------


def brute_trend(successes, trials, scores, alternative):
    """Every way of spreading the total successes over the groups, weighted Π C(nᵢ, sᵢ)."""
    total = sum(successes)
    outcomes = []
    for split in itertools.product(*(range(n + 1) for n in trials)):
        if sum(split) == total:
            ways = math.prod(math.comb(n, s) for n, s in zip(trials, split))
            outcomes.append((sum(Fraction(c) * s for c, s in zip(scores, split)), ways))
    everything = sum(w for _, w in outcomes)
    outcomes = [(v, Fraction(w, everything)) for v, w in outcomes]
    mean = sum(v * w for v, w in outcomes)
    observed = sum(Fraction(c) * s for c, s in zip(scores, successes))
    variance = sum((v - mean) ** 2 * w for v, w in outcomes)
    return float(p_from(outcomes, observed, mean, alternative)), float(observed - mean) / math.sqrt(variance)


@pytest.mark.parametrize("successes,trials,scores", [
    ([1, 2, 4], [5, 5, 5], None),
    ([3, 1, 0, 2], [4, 6, 3, 5], None),
    ([0, 2, 5], [6, 4, 7], [0.0, 0.5, 2.0]),          # unequal, non-integer scores
    ([2, 2, 2], [4, 4, 4], [1.0, 2.0, 3.0]),          # flat: two-sided p is 1
])
def test_trend_test_matches_brute_force(successes, trials, scores):
    for alternative in sig.ALTERNATIVES:
        result = sig.trend_test(successes, trials, scores, alternative)
        expected_p, expected_z = brute_trend(successes, trials, scores or list(range(len(trials))), alternative)
        assert result.p == pytest.approx(expected_p, rel=1e-10)
        assert result.statistic == pytest.approx(expected_z, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("successes,trials,scores", [([1, 2, 3], [3, 4, 4], [0.0, 1.0, 2.0]),
                                                    ([2, 0, 3], [3, 3, 4], [0.0, 0.5, 2.0])])
def test_trend_test_one_sided_against_scipys_permutation_test(successes, trials, scores):
    # The conditional null is every assignment of the pooled outcomes (1 a success) to the groups.
    outcomes = [np.array([1.0] * s + [0.0] * (n - s)) for s, n in zip(successes, trials)]

    def statistic(*groups, axis=-1):
        return sum(c * g.sum(axis=axis) for c, g in zip(scores, groups))

    for alternative in ("greater", "less"):
        assert sig.trend_test(successes, trials, scores, alternative).p == pytest.approx(
            scipy_permutation_p(outcomes, statistic, alternative), rel=1e-9)


def test_trend_test_with_two_groups_is_one_sided_fisher():
    for b_success, a_success in [(1, 6), (4, 4), (7, 2)]:
        for alternative in ("greater", "less"):
            trend = sig.trend_test([b_success, a_success], [8, 9], alternative=alternative)
            assert trend.p == pytest.approx(sig.fisher_exact(a_success, 9, b_success, 8, alternative).p, rel=1e-12)


def test_trend_test_detects_a_rising_rate():
    assert sig.trend_test([0, 2, 5, 8], [8, 8, 8, 8], alternative="greater").p < 0.001
    assert sig.trend_test([0, 2, 5, 8], [8, 8, 8, 8], alternative="less").p > 0.999


def brute_jonckheere(groups, alternative):
    """Every permutation of the pooled values into the groups' slots, JT by its definition."""
    def jt(parts):
        return sum(u_of_lower(parts[i], parts[j]) for i in range(len(parts)) for j in range(i + 1, len(parts)))

    def u_of_lower(earlier, later):
        return sum(1.0 if x < y else 0.5 if x == y else 0.0 for x in earlier for y in later)

    pooled, sizes = [v for g in groups for v in g], [len(g) for g in groups]
    bounds = np.cumsum([0] + sizes)
    tally = {}
    for order in itertools.permutations(pooled):
        value = jt([order[bounds[i]:bounds[i + 1]] for i in range(len(groups))])
        tally[value] = tally.get(value, 0) + 1
    everything = sum(tally.values())
    outcomes = [(v, Fraction(c, everything)) for v, c in tally.items()]
    mean = Fraction(sum(a * b for a, b in itertools.combinations(sizes, 2)), 2)
    return float(p_from(outcomes, jt(groups), mean, alternative)), jt(groups)


@pytest.mark.parametrize("groups", [
    [[1.0, 3.0], [2.0, 2.0, 5.0], [4.0, INF]],        # ties and inf
    [[2.0, 2.0, 1.0], [INF, 2.0], [INF, 3.0]],        # ties at inf across groups
    [[0.5], [0.1, 0.9, 0.3], [0.7], [0.2, 0.8]],      # four groups, no ties
])
def test_jonckheere_exact_matches_every_permutation(groups):
    for alternative in sig.ALTERNATIVES:
        result = sig.jonckheere(groups, alternative)
        expected_p, expected_jt = brute_jonckheere(groups, alternative)
        assert result.method == "exact permutation"
        assert result.statistic == expected_jt
        assert result.p == pytest.approx(expected_p, rel=1e-12)


def test_jonckheere_one_sided_against_scipys_permutation_test():
    groups = [[1.0, 3.0], [2.0, 2.0, 5.0], [4.0, INF]]

    def statistic(*parts, axis=-1):  # JT: pairs (x earlier, y later) with x < y, ties a half
        return sum(u_statistic(parts[j], parts[i], axis) for i in range(len(parts)) for j in range(i + 1, len(parts)))

    for alternative in ("greater", "less"):
        assert sig.jonckheere(groups, alternative).p == pytest.approx(
            scipy_permutation_p(groups, statistic, alternative), rel=1e-12)


def test_jonckheere_monte_carlo_is_seeded_and_close_to_exact():
    groups = [[1.0, 2.5, 2.0, 4.0], [3.0, 2.0, 5.0, 6.0], [4.5, 7.0, INF, 5.5]]  # 34 650 arrangements
    exact = sig.jonckheere(groups, "greater")
    sampled = sig.jonckheere(groups, "greater", exact_limit=0)
    assert sampled.method == "Monte Carlo permutation (20000)"
    assert sampled.statistic == exact.statistic
    assert sampled.p == pytest.approx(exact.p, abs=0.002)  # se √(p(1 − p)/20000) ≈ 0.0003
    assert sig.jonckheere(groups, "greater", exact_limit=0) == sampled
    assert sig.jonckheere(groups, "greater", exact_limit=0, seed=1).p != sampled.p
    # Eight per group in four groups is ~10¹⁷ arrangements: Monte Carlo by default.
    rng = np.random.default_rng(0)
    big = [list(rng.normal(shift, 1, 8)) for shift in (0, 0.5, 1.0, 1.5)]
    result = sig.jonckheere(big, "greater")
    assert result.method.startswith("Monte Carlo") and result.p < 0.01


# ---- Bootstrap ------------------------------------------------------------------------------------


def test_bootstrap_ratio_follows_the_documented_resampling():
    a, b = [3.0, 5.0, 4.0, 9.0, 6.0, 2.0], [2.0, 2.5, 3.0, 1.0, 4.0]
    estimate, low, high = sig.bootstrap_ratio(a, b, n=500, seed=3)
    rng = np.random.default_rng(3)
    ra = np.median(np.array(a)[rng.integers(0, 6, (500, 6))], axis=1)
    rb = np.median(np.array(b)[rng.integers(0, 5, (500, 5))], axis=1)
    ratios = np.sort(ra / rb)
    assert estimate == np.median(a) / np.median(b)
    # Percentile ends that are replicate values: the ⌈0.025·500⌉-th and ⌈0.975·500⌉-th smallest.
    assert (low, high) == (ratios[12], ratios[487])
    assert sig.bootstrap_ratio(a, b, n=500, seed=3) == (estimate, low, high)
    assert sig.bootstrap_ratio(a, b, n=500, seed=4) != (estimate, low, high)


def test_bootstrap_intervals_hold_the_estimate_and_shrink_with_the_sample():
    rng = np.random.default_rng(0)
    widths = []
    for size in (10, 40, 160):
        a, b = rng.lognormal(1.0, 0.5, size), rng.lognormal(0.5, 0.5, size)
        for statistic in ("median", "mean"):
            estimate, low, high = sig.bootstrap_ratio(a, b, statistic=statistic)
            assert low <= estimate <= high
            d_estimate, d_low, d_high = sig.bootstrap_difference(a, b, statistic=statistic)
            assert d_low <= d_estimate <= d_high
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]


def test_bootstrap_with_censoring_uses_kaplan_meier_medians():
    a, censored_a = [10.0, 20.0, 30.0, INF, INF], [False, False, False, True, True]
    b, censored_b = [5.0, 8.0, 12.0, 15.0], [False, False, False, False]
    estimate, low, high = sig.bootstrap_ratio(a, b, censored_a, censored_b)
    # KM of a: S(10) = 4/5, S(20) = 3/5, S(30) = 2/5 → 30. b uncensored: the lower middle value, 8.
    assert kaplan_meier_median(a, censored_a) == 30 and kaplan_meier_median(b, censored_b) == 8
    assert estimate == 30 / 8 and low <= estimate <= high
    # More than half never happened: not reached, the ratio is inf, and so is the interval's top.
    never = [10.0, INF, INF, INF]
    estimate, low, high = sig.bootstrap_ratio(never, b, [False, True, True, True], censored_b)
    assert estimate == INF and high == INF and low > 0
    assert sig.bootstrap_ratio(b, never, censored_b, [False, True, True, True])[0] == 0.0
    assert sig.bootstrap_difference(never, b, [False, True, True, True], censored_b)[0] == INF
    with pytest.raises(ValueError):
        sig.bootstrap_ratio(a, b, censored_a, statistic="mean")


# ---- Multiplicity ---------------------------------------------------------------------------------


def test_holm_by_hand_with_untested_claims():
    # Sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → max so far 0.06.
    got = sig.holm([0.01, None, 0.04, 0.03, 0.005, None])
    expected = [0.03, None, 0.06, 0.06, 0.02, None]
    assert [g is None for g in got] == [e is None for e in expected]
    assert [g for g in got if g is not None] == pytest.approx([e for e in expected if e is not None], rel=1e-12)
    assert sig.holm([0.5, 0.6]) == [1.0, 1.0]
    assert sig.holm([None, None]) == [None, None]
    assert sig.holm([0.02, 0.02]) == pytest.approx([0.04, 0.04])


# ---- Power ----------------------------------------------------------------------------------------


def test_detectable_shift_ratio_against_simulation():
    ratios = [sig.detectable_shift_ratio(n, n) for n in (8, 16, 32)]
    assert all(r is not None for r in ratios) and ratios[0] > ratios[1] > ratios[2] > 1
    assert sig.detectable_shift_ratio(3, 3) is None  # the smallest exact two-sided p is 0.1
    assert sig.mann_whitney_power(16, 16, 1.0) == pytest.approx(0.05, abs=1e-9)
    # Simulate log-normal times (log-sd 1) at the detectable ratio; the normal-approximation test
    # (no ties in continuous data) rejects about 80% of the time.
    n, ratio = 16, ratios[1]
    rng = np.random.default_rng(7)
    x, y = rng.normal(math.log(ratio), 1, (4000, n)), rng.normal(0, 1, (4000, n))
    u = (x[:, :, None] > y[:, None, :]).sum(axis=(1, 2))
    z = (np.abs(u - n * n / 2) - 0.5) / math.sqrt(n * n * (2 * n + 1) / 12)
    assert (z >= NormalDist().inv_cdf(0.975)).mean() == pytest.approx(0.8, abs=0.03)
