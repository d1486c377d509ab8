import pytest

from emergence_bench.stats.medians import kaplan_meier_median, wilson_interval


def test_kaplan_meier_without_censoring_is_the_lower_median():
    assert kaplan_meier_median([30, 10, 20, 40], [False] * 4) == 20
    assert kaplan_meier_median([10, 20, 30], [False] * 3) == 20


def test_kaplan_meier_with_censoring():
    # Hand computation: times 10, 20(c), 30, 40(c), 50.
    # S(10) = 4/5; at 30 three at risk: S = 4/5 · 2/3 = 8/15 > 0.5; at 50 one at risk: S = 0 → median 50.
    assert kaplan_meier_median([10, 20, 30, 40, 50], [False, True, False, True, False]) == 50
    # Dropping the censored runs would (wrongly) give 30.
    assert kaplan_meier_median([10, 30, 50], [False] * 3) == 30


def test_kaplan_meier_all_censored_or_too_few_events_is_not_reached():
    assert kaplan_meier_median([100, 100, 100], [True] * 3) is None
    assert kaplan_meier_median([10, 100, 100, 100], [False, True, True, True]) is None
    assert kaplan_meier_median([], []) is None


def test_wilson_interval_holds_the_observed_rate_for_every_count():
    """At 0/n and n/n the bound is the rate itself; float rounding once put it outside (6/6 gave a
    high of 0.9999999999999999, and the report's error bars a negative length)."""
    for trials in range(1, 65):
        for successes in range(trials + 1):
            low, high = wilson_interval(successes, trials)
            assert 0.0 <= low <= successes / trials <= high <= 1.0, (successes, trials)
        assert wilson_interval(0, trials)[0] == 0.0 and wilson_interval(trials, trials)[1] == 1.0


def test_wilson_interval_hand_computed():
    low, high = wilson_interval(4, 4)
    assert low == pytest.approx(0.5101, abs=1e-4) and high == 1.0
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_kaplan_meier_curve_and_greenwood_variance_by_hand():
    from emergence_bench.stats.medians import kaplan_meier

    # Without censoring, S(t_j) = 1 − j/n and Greenwood's variance is the binomial p(1 − p)/n.
    curve = kaplan_meier(list(range(1, 11)), [False] * 10)
    for j, (time, survival, variance) in enumerate(curve, start=1):
        assert time == j and survival == pytest.approx(1 - j / 10)
        assert variance == pytest.approx((10 - j) * j / 1000)
    # Censored times leave S unchanged but shrink the risk set: 10, 20(c), 30 → S = 2/3, then 0.
    assert [(t, round(s, 4)) for t, s, _ in kaplan_meier([10, 20, 30], [False, True, False])] == [
        (10, 0.6667), (30, 0.0)]


def test_kaplan_meier_median_interval_by_hand():
    from emergence_bench.stats.medians import kaplan_meier_median_ci

    # n = 10 events at 1..10: se(j) = sqrt((10 − j) j / 1000).
    # low: j = 3 (S = 0.7 ≤ 0.5 + 1.96·0.1449 = 0.784; at j = 2, 0.8 > 0.748).
    # high: j = 8 (S = 0.2 < 0.5 − 1.96·0.1265 = 0.252; at j = 7, 0.3 > 0.216).
    assert kaplan_meier_median_ci(list(range(1, 11)), [False] * 10) == (3, 8)
    assert kaplan_meier_median(list(range(1, 11)), [False] * 10) == 5
    # All censored: nothing is reached.
    assert kaplan_meier_median_ci([100] * 4, [True] * 4) == (None, None)
    # Half never emerge: the median may be reached but the upper limit is not.
    low, high = kaplan_meier_median_ci([10, 20, 30, 100, 100, 100], [False] * 3 + [True] * 3)
    assert low == 20 and high is None  # S(10) = 5/6 > 0.5 + 1.96·0.152; S(20) = 2/3 < 0.5 + 1.96·0.192
