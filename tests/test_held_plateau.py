"""The held plateau (benchmark/stats/held_plateau.py) on constructed loss curves with known answers."""

from __future__ import annotations

import math

import pytest

from emergence_bench.reporting.plateau_score import first_drop
from emergence_bench.results.row_curves import cells_worth, plateau_time, run_plateau, run_worth, worth
from emergence_bench.stats.held_plateau import held_plateau

CHANCE = math.log(4)
STEPS = list(range(9, 2000, 10))  # the recorder's curve: the mean of every 10 steps


def logistic(t: float, at: float, width: float, high: float, low: float) -> float:
    return low + (high - low) / (1 + math.exp((t - at) / width))


def first_crossing(values: list[float], threshold: float) -> int | None:
    """The callback's first-drop rule on an EMA (0.9) started at chance, for comparison."""
    ema = CHANCE
    for t, y in zip(STEPS, values):
        ema = 0.9 * ema + 0.1 * y
        if ema < threshold:
            return t
    return None


def test_a_long_shortcut_plateau_then_a_sharp_drop():
    shortcut = 1.0
    curve = [logistic(t, 1200, 20, shortcut, 0.02) if t > 30 else CHANCE for t in STEPS]
    found = held_plateau(STEPS, curve, CHANCE)
    assert found is not None and found.worth
    assert 1100 <= found.end <= 1200 and found.start <= 50
    assert found.level == pytest.approx(shortcut, abs=0.01) and found.drop_width < 200


def test_a_smooth_decay_has_no_plateau_worth_the_name():
    for exponent in (0.3, 0.5, 1.0, 2.0):
        curve = [CHANCE * (1 + t / 30) ** -exponent for t in STEPS]
        found = held_plateau(STEPS, curve, CHANCE)
        assert found is None or not found.worth, exponent
    exponential = [CHANCE * math.exp(-t / 300) for t in STEPS]
    found = held_plateau(STEPS, exponential, CHANCE)
    assert found is None or not found.worth


def test_an_early_drop_from_chance_then_a_long_shortcut_plateau_reads_the_late_drop():
    """MQAR's shape: chance → the shortcut's level within 60 steps, held there, then the pattern. The
    first-drop rule (threshold just under chance) reads the early drop; the held plateau the late one."""
    curve = [logistic(t, 40, 8, CHANCE, 0.7) if t < 900 else logistic(t, 1000, 15, 0.7, 0.02) for t in STEPS]
    assert first_crossing(curve, CHANCE - 0.1 * CHANCE) < 100
    found = held_plateau(STEPS, curve, CHANCE)
    assert found is not None and found.worth
    assert 900 <= found.end <= 1000 and found.level == pytest.approx(0.7, abs=0.02)


def test_a_plateau_held_to_the_end_is_censored_and_noise_does_not_end_it():
    noisy = [CHANCE + 0.03 * math.sin(7.1 * i) for i in range(len(STEPS))]
    found = held_plateau(STEPS, noisy, CHANCE)
    assert found is not None and found.end is None and found.worth


def test_a_row_reads_its_train_curve_and_falls_back_where_it_has_none():
    curve = [[t, logistic(t, 1200, 20, 1.0, 0.02) if t > 30 else CHANCE] for t in STEPS]
    row = {"status": "ok", "curves": {"train_loss": curve}, "timing": {"steps": 2000},
           "task_facts": {"chance_loss": CHANCE, "floor_loss": 0.0},
           "plateau": {"first_drop_step": 40}, "emergence": {"step": 1300}}
    assert run_plateau(row).end == plateau_time(row)[0] and plateau_time(row)[1] is False
    assert first_drop(row) == (40.0, False)  # the first loss drop, for comparison
    held = {**row, "curves": {"train_loss": [[t, CHANCE] for t in STEPS]}}
    assert plateau_time(held) == (2000.0, True)  # still held at the budget: censored
    fell = {**row, "curves": {"train_loss": [[9, 0.5], [19, 0.1]]}}
    assert plateau_time(fell) == (9.0, False)  # no hold at all: it left at once
    assert plateau_time({**row, "curves": {}}) is None


def staircase_row(onsets: list[int], width: float) -> dict:
    """A run whose cells each hold at chance and drop at their own onset (logistic ``width``), its train
    loss the cells' mean: held only until the first cell drops, then sliding until the last does."""
    cells = [[logistic(t, at, width, CHANCE, 0.01) for t in STEPS] for at in onsets]
    return {"status": "ok", "timing": {"steps": 2000}, "task_facts": {"chance_loss": CHANCE, "floor_loss": 0.0},
            "curves": {"train_loss": [[t, sum(c[i] for c in cells) / len(cells)] for i, t in enumerate(STEPS)],
                       "eval_cells": [[t, [c[i] for c in cells]] for i, t in enumerate(STEPS)]}}


def test_a_staircase_of_cells_is_worth_the_name_by_its_cells_and_a_smooth_one_is_not():
    stairs = staircase_row([500, 800, 1100, 1400, 1700], width=10)
    assert not run_worth(stairs)  # the run's loss slides from the first drop to the last
    assert cells_worth(stairs) and worth(stairs)  # each cell held, then dropped sharply
    together = staircase_row([1200] * 5, width=10)
    assert run_worth(together) and worth(together)
    smooth = staircase_row([100, 400, 700, 1000, 1300], width=150)  # each cell slides, no hold worth it
    assert not cells_worth(smooth) and not worth(smooth)
    assert not cells_worth({**stairs, "curves": {"train_loss": stairs["curves"]["train_loss"]}})  # no cells
