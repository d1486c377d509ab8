import pytest

from benchmark.stats import kaplan_meier_median, wilson_interval


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


def test_wilson_interval_hand_computed():
    low, high = wilson_interval(4, 4)
    assert low == pytest.approx(0.5101, abs=1e-4) and high == 1.0
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
