"""The power of the claims' tests and the sample-size search that sizes a replication: exact powers
against sums by hand, simulated powers against the exact ones and Schoenfeld's formula, the search's
answer against its target, and the emergence model against the facts it was fitted to."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from emergence_bench.stats.emergence_model import EmergenceModel, log_sd_for_spread
from emergence_bench.stats.power import binomial_power, measured_sign_power, simulated_power, smallest_size
from emergence_bench.stats.quartile_ratio import relative_to_median, spread
from emergence_bench.stats.significance import binomial_test, logrank


def binomial(k: int, n: int, p: float) -> float:
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


def test_the_exact_binomial_power_is_the_textbook_sum_over_its_rejection_region():
    # n = 20 against 1/2 at 0.05: the two-sided test rejects k ≤ 5 or k ≥ 15 (P = 0.041), not 6 or 14 (0.115).
    assert 2 * sum(binomial(k, 20, 0.5) for k in range(15, 21)) == pytest.approx(0.0414, abs=1e-4)
    assert 2 * sum(binomial(k, 20, 0.5) for k in range(14, 21)) > 0.05
    by_hand = sum(binomial(k, 20, 0.8) for k in [*range(0, 6), *range(15, 21)])
    assert binomial_power(20, 0.8, 0.5, 0.05) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(0.8042, abs=1e-4)
    # Under the null the power is the test's size, at most alpha; no trial, no power.
    assert binomial_power(20, 0.5, 0.5, 0.05) == pytest.approx(0.0414, abs=1e-4)
    assert binomial_power(0, 0.9) == 0.0
    with pytest.raises(ValueError, match="alpha"):
        binomial_power(10, 0.5, alpha=1.5)


def test_the_sign_test_power_with_unmeasured_runs_averages_over_how_many_were_measured():
    assert measured_sign_power(24, 1.0, 0.2, 0.05) == pytest.approx(binomial_power(24, 0.2, 0.5, 0.05))
    assert measured_sign_power(24, 0.0, 0.2, 0.05) == 0.0
    by_hand = sum(binomial(m, 12, 0.75) * binomial_power(m, 0.1, 0.5, 0.05) for m in range(13))
    assert measured_sign_power(12, 0.75, 0.1, 0.05) == pytest.approx(by_hand, rel=1e-12)
    assert measured_sign_power(12, 0.75, 0.1, 0.05) < binomial_power(12, 0.1, 0.5, 0.05)  # fewer runs, less power


def test_simulated_power_matches_the_exact_binomial_power_and_repeats_with_its_seed():
    def p_value(rng: np.random.Generator) -> float:
        return binomial_test(int(rng.binomial(20, 0.8)), 20).p

    found = simulated_power(p_value, 0.05, 2000, seed=3)
    assert abs(found.power - binomial_power(20, 0.8, 0.5, 0.05)) < 3 * found.se
    assert found == simulated_power(p_value, 0.05, 2000, seed=3)
    with pytest.raises(ValueError, match="sims"):
        simulated_power(p_value, 0.05, 0)


def test_the_simulated_log_rank_power_agrees_with_schoenfelds_formula_and_holds_its_size_under_the_null():
    def p_value(hazard_ratio: float):
        def draw(rng: np.random.Generator) -> float:
            a, b = rng.exponential(1 / hazard_ratio, 50), rng.exponential(1.0, 50)
            none = np.zeros(50, bool)
            return logrank(a, none, b, none).p
        return draw

    # Schoenfeld: d = 100 events, 1:1, hazard ratio 2: power = Φ(√(d/4)·ln 2 − z₀.₉₇₅) = 0.934.
    normal = NormalDist()
    schoenfeld = normal.cdf(math.sqrt(100 / 4) * math.log(2) - normal.inv_cdf(0.975))
    assert schoenfeld == pytest.approx(0.934, abs=1e-3)
    assert simulated_power(p_value(2.0), 0.05, 1000).power == pytest.approx(schoenfeld, abs=0.04)
    assert simulated_power(p_value(1.0), 0.05, 1000).power == pytest.approx(0.05, abs=0.02)


def test_the_sample_size_search_hits_its_target_and_grows_with_it():
    sizes = list(range(8, 129, 4))
    power_at = lambda n: binomial_power(n, 0.7, 0.5, 0.05)  # noqa: E731
    found = []
    for target in (0.5, 0.6, 0.7, 0.8, 0.9):
        n, power = smallest_size(power_at, target, sizes)
        assert n is not None and power == power_at(n) >= target
        assert all(power_at(m) < target for m in sizes if m < n)  # the first size that reaches it
        found.append(n)
    assert found == sorted(found) and found[0] < found[-1]
    assert smallest_size(power_at, 0.9999, sizes) == (None, power_at(128))
    with pytest.raises(ValueError, match="ascending"):
        smallest_size(power_at, 0.8, [16, 8])


def test_the_emergence_model_holds_the_share_and_median_it_was_fitted_to():
    scales = (1.14, 1 / 1.14)
    with_never = EmergenceModel.fitted(14 / 16, 760, 0.26, 1500, 20, scales)
    assert 0 < with_never.never < 0.2
    narrowed = EmergenceModel.fitted(13 / 16, 1160, 0.26, 1500, 20, scales)  # needs never < 0 at 0.26
    assert narrowed.never == 0 and narrowed.log_sd < 0.26
    for model, emerged, median in ((with_never, 14 / 16, 760), (narrowed, 13 / 16, 1160)):
        assert model.share_by(1500) == pytest.approx(emerged, abs=1e-9)
        assert model.share_by(median) == pytest.approx(0.5, abs=1e-9)
        times, censored = model.draw(np.random.default_rng(0), 20_000)
        assert times.shape == censored.shape == (2, 20_000)
        assert 1 - censored.mean() == pytest.approx(emerged, abs=0.01)  # eval rounding moves it by < 1%
        assert np.all(times[~censored] % 20 == 0) and times.max() <= 1500
    with pytest.raises(ValueError, match="more than half"):
        EmergenceModel.fitted(0.4, 760, 0.26, 1500, 20)


def test_the_log_sd_for_a_spread_gives_that_quartile_ratio_in_a_large_draw():
    model = EmergenceModel(never=2 / 16, median=700, log_sd=log_sd_for_spread(1.52, 2 / 16), budget=10**9, every=1)
    times, censored = model.draw(np.random.default_rng(1), 200_000)
    steps = np.where(censored, np.inf, times)[0]
    assert float(spread(steps[None])[0]) == pytest.approx(1.52, abs=0.01)
    with pytest.raises(ValueError, match="spread"):
        log_sd_for_spread(0.9, 0.1)


def test_relative_steps_divide_by_the_lower_median_or_the_latest_step_when_most_never_emerged():
    assert relative_to_median([100.0, 200.0, 400.0, math.inf], 1500) == [0.5, 1.0, 2.0, math.inf]
    assert relative_to_median([300.0, math.inf, math.inf], 1500) == [0.2, math.inf, math.inf]
