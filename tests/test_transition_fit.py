"""The abruptness rule's acceptance on constructed curves (issue 51, item 1), frozen before ladder
v4's calibration: at most 5% of power-law and exponential curves read abrupt, at least 90% of
plateau-then-drop curves (a plateau at least three times the drop's width) do.

Every curve carries Gaussian eval noise of ``NOISE``: the largest 90th percentile, over the groups of
the exploration runs (seeds 104-107, docs/ranking.md "The abruptness rule"), of a per-cell eval
curve's residual standard deviation around its best model, as a share of chance − floor (MQAR's
0.051; the linear map's 0.033), here on the linear map's scale, chance − floor = ln 2."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emergence_bench.stats.transition_fit import MAX_DECADES, fit_transition, smooth_surrogates

CHANCE = math.log(2)
NOISE = 0.05 * CHANCE  # see the module docstring
DRAWS = 120


def grid(every: int, budget: int) -> np.ndarray:
    return np.arange(every, budget + 1, every, dtype=float)  # the first eval one interval in, as the Trainer does


def plateau_then_drop(t: np.ndarray, onset: float, width: float, high: float, low: float) -> np.ndarray:
    """A level held until ``onset`` (the 10% point), then a logistic drop whose 10%-90% span is ``width``."""
    scale = width / (2 * math.log(9))
    mid = onset + width / 2
    return high - (high - low) / (1 + np.exp(-(t - mid) / scale))


def share_abrupt(curves: list[tuple[np.ndarray, np.ndarray]]) -> float:
    found = [fit_transition(t, y, min_drop=0.1 * CHANCE) for t, y in curves]
    return sum(f is not None and f.abrupt for f in found) / len(curves)


def noisy(rng: np.random.Generator, y: np.ndarray) -> np.ndarray:
    return y + rng.normal(0.0, NOISE, len(y))


@pytest.mark.parametrize("every, budget", [(20, 1500), (25, 600), (10, 800)])
def test_plateau_then_drop_reads_abrupt_in_at_least_90_percent(every: int, budget: int) -> None:
    rng = np.random.default_rng(every)
    t, curves = grid(every, budget), []
    for _ in range(DRAWS):
        width = float(np.exp(rng.uniform(math.log(1.5 * every), math.log(budget / 8))))
        low_onset = max(3 * width, 3 * every)  # a plateau at least 3x the width, seen over 3 evals
        onset = float(rng.uniform(low_onset, budget - 1.5 * width))
        high = CHANCE * rng.uniform(0.6, 1.0)
        curves.append((t, noisy(rng, plateau_then_drop(t, onset, width, high, high * rng.uniform(0.0, 0.5)))))
    assert share_abrupt(curves) >= 0.90


@pytest.mark.parametrize("every, budget", [(20, 1500), (25, 600), (10, 800)])
def test_power_laws_and_exponentials_read_abrupt_in_at_most_5_percent(every: int, budget: int) -> None:
    rng = np.random.default_rng(1000 + every)
    t, curves = grid(every, budget), []
    for i in range(DRAWS):
        scale = float(np.exp(rng.uniform(math.log(1.0), math.log(3 * budget))))
        floor = CHANCE * rng.uniform(0.0, 0.4)
        if i % 2:
            shape = (1 + t / scale) ** -rng.uniform(0.2, 3.0)
        else:
            shape = np.exp(-t / scale)
        curves.append((t, noisy(rng, floor + (CHANCE - floor) * shape)))
    assert share_abrupt(curves) <= 0.05


def test_a_late_drop_is_timed_by_its_onset_and_width() -> None:
    t = grid(20, 1500)
    found = fit_transition(t, plateau_then_drop(t, onset=800, width=100, high=0.69, low=0.05))
    assert found is not None and found.abrupt
    assert abs(found.onset - 800) <= 20 and abs(found.width - 100) <= 20
    assert found.decades == pytest.approx(math.log10(900 / 800), abs=0.05)
    assert found.high == pytest.approx(0.69, abs=0.01) and found.low == pytest.approx(0.05, abs=0.01)


def test_a_drop_as_long_as_its_plateau_or_an_early_drop_is_not_abrupt() -> None:
    t = grid(20, 1500)
    slow = fit_transition(t, plateau_then_drop(t, onset=300, width=600, high=0.69, low=0.05))
    assert slow is not None and slow.decades > MAX_DECADES and not slow.abrupt
    early = fit_transition(t, plateau_then_drop(t, onset=30, width=10, high=0.69, low=0.05))
    assert early is not None and early.plateau_evals < 3 and not early.abrupt  # no plateau seen before it


def test_a_drop_between_two_evals_is_as_wide_as_the_evals_resolve() -> None:
    t = grid(100, 2000)
    found = fit_transition(t, np.where(t < 1050, 0.69, 0.05))
    assert found is not None and found.abrupt
    assert found.decades == pytest.approx(math.log10(1100 / 1000), abs=1e-9)  # the two evals around it


def test_a_staircase_of_even_steps_is_not_one_abrupt_drop() -> None:
    t = grid(25, 3000)
    whole = sum(plateau_then_drop(t, onset=300 + 400 * i, width=40, high=0.69 / 6, low=0.0) for i in range(6))
    found = fit_transition(t, whole)
    assert found is not None and not found.abrupt


def test_a_small_drop_or_a_short_curve_is_no_transition() -> None:
    t = grid(20, 1500)
    small = fit_transition(t, plateau_then_drop(t, onset=800, width=60, high=0.69, low=0.66), min_drop=0.069)
    assert small is not None and not small.abrupt
    assert fit_transition([10, 20, 30, 40, 50], [0.7, 0.7, 0.7, 0.1, 0.1]) is None
    with pytest.raises(ValueError, match="increasing"):
        fit_transition([10, 20, 20, 30, 40, 50, 60], [0.7] * 7)


def test_smooth_surrogates_keep_the_curve_s_shape_and_noise() -> None:
    rng = np.random.default_rng(3)
    t = grid(20, 1500)
    y = noisy(rng, 0.1 + 0.6 * (1 + t / 200) ** -1.0)
    draws = smooth_surrogates(t, y, draws=40, seed=1)
    assert len(draws) == 40 and all(len(d) == len(t) for d in draws)
    assert draws != smooth_surrogates(t, y, draws=40, seed=2)
    assert sum(f is not None and f.abrupt for d in draws if (f := fit_transition(t, d))) <= 2
