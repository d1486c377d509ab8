"""The abruptness statistic on curves of known shape, and its leaderboard column."""

from __future__ import annotations

import math
import random

import pytest

from emergence_bench.measurements.abruptness import abrupt_cells
from emergence_bench.results.row_curves import cell_transitions
from emergence_bench.stats.transition_share import ABRUPT_SHARE, transition

GRID = list(range(25, 3001, 25))  # evals every 25 steps, the first at 25 (as the Trainer evaluates)


def logistic(t0: float, k: float, high: float = 0.69, low: float = 0.0) -> list[float]:
    return [low + (high - low) / (1 + math.exp((t - t0) / k)) for t in GRID]


@pytest.mark.parametrize("t0, k", [(500, 10), (1000, 25), (2000, 50), (1500, 20)])
def test_a_logistic_drop_after_a_plateau_is_abrupt_with_its_width(t0: float, k: float) -> None:
    found = transition(GRID, logistic(t0, k))
    assert found is not None and found.abrupt
    # 80% of a logistic's drop lies within t0 ± k·ln 9 (its 10%–90% width is 2k·ln 9), to one eval.
    assert abs(found.width - 2 * k * math.log(9)) <= 25 + 1e-9
    assert found.start <= t0 <= found.end and abs(found.midpoint - t0) <= 25
    assert found.share == pytest.approx(found.width / found.end)


@pytest.mark.parametrize("exponent", [0.2, 0.5, 1.0, 2.0, 3.0])
@pytest.mark.parametrize("scale", [1, 10, 50, 300, 1000])
def test_a_power_law_decay_is_never_abrupt(exponent: float, scale: float) -> None:
    found = transition(GRID, [(1 + t / scale) ** -exponent for t in GRID])
    assert found is not None and found.share >= 2 * ABRUPT_SHARE and not found.abrupt


@pytest.mark.parametrize("tau", [20, 100, 500, 1500])
def test_an_exponential_decay_is_not_abrupt(tau: float) -> None:
    found = transition(GRID, [math.exp(-t / tau) for t in GRID])
    assert found is not None and not found.abrupt


def test_a_slow_transition_after_a_short_plateau_is_not_abrupt() -> None:
    found = transition(GRID, logistic(400, 80))  # the drop takes longer than the plateau before it
    assert found is not None and not found.abrupt


def test_noise_upwards_is_not_undone_progress_and_a_flat_curve_has_no_transition() -> None:
    rng = random.Random(0)
    noisy = [y + rng.gauss(0, 0.005) for y in logistic(1200, 15)]
    found = transition(GRID, noisy)
    assert found is not None and found.abrupt and abs(found.midpoint - 1200) <= 50
    flat = [0.69 + rng.gauss(0, 0.01) for _ in GRID]
    assert transition(GRID, flat, min_drop=0.069) is None
    assert transition(GRID, [0.5] * len(GRID)) is None
    assert transition([25], [0.3]) is None


def test_a_drop_between_two_evals_is_unresolved() -> None:
    steps, values = [100, 200, 300, 400], [0.7, 0.7, 0.0, 0.0]
    found = transition(steps, values)
    assert found is not None and (found.start, found.end, found.width) == (200, 300, 100)
    assert not found.resolved and found.share == pytest.approx(1 / 3)


def test_a_staircase_reads_abrupt_per_cell_not_as_a_whole() -> None:
    cells = [logistic(300 + 300 * i, 10) for i in range(6)]
    whole = [sum(c[j] for c in cells) / len(cells) for j in range(len(GRID))]
    assert not transition(GRID, whole).abrupt  # type: ignore[union-attr]
    row = {"curves": {"eval_cells": [[t, [c[j] for c in cells]] for j, t in enumerate(GRID)]},
           "task_facts": {"chance_loss": math.log(2), "floor_loss": 0.0}}
    assert all(t is not None and t.abrupt for t in cell_transitions(row))
    never = {**row, "curves": {"eval_cells": [[t, [0.69, 0.68]] for t in GRID]}}
    columns = abrupt_cells([row, never])
    assert (columns["abrupt_cells"], columns["cells_with_transition"]) == (6, 6)
    assert columns["median_transition_share"] < ABRUPT_SHARE
    assert abrupt_cells([never])["median_transition_share"] is None
