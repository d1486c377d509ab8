"""The plateau score (reporting/plateau_score.py): Kaplan–Meier medians over resamples, ratios to a
baseline mixer with bootstrap intervals that respect censoring, checked against brute force."""

import itertools
import math

import numpy as np
import pytest

from emergence_bench.config import ConfigError
from emergence_bench.reporting import plateau_score
from emergence_bench.stats.medians import kaplan_meier_median, kaplan_meier_medians

BUDGET = 1000


def run(plateau: float | None, emerged: float | None = None, steps: int = BUDGET) -> dict:
    """A result row with only what the plateau score reads."""
    return {"status": "ok", "plateau": {"first_drop_step": plateau}, "emergence": {"step": emerged},
            "timing": {"steps": steps}, "config": {"trainer": {"max_steps": BUDGET}}}


def cell(ends) -> list[dict]:
    """One run per plateau end (None: never left the plateau within the budget)."""
    return [run(e) for e in ends]


def test_batched_kaplan_meier_medians_equal_the_scalar_one_row_by_row():
    rng = np.random.default_rng(1)
    times = rng.integers(1, 8, size=(500, 7)).astype(float)  # many ties
    censored = rng.random((500, 7)) < 0.4
    batched = kaplan_meier_medians(times, censored)
    for t, c, m in zip(times, censored, batched):
        expected = kaplan_meier_median(list(t), list(c))
        assert (m == np.inf) if expected is None else m == expected


def test_first_drop_uses_emergence_when_the_smoothed_loss_lagged():
    assert plateau_score.first_drop(run(120, 150)) == (120, False)
    assert plateau_score.first_drop(run(None, 150, steps=150)) == (150, False)  # left it by then
    assert plateau_score.first_drop(run(None, None, steps=700)) == (700, True)  # censored where it stopped


def test_constant_cells_give_exact_ratios_and_a_point_interval():
    cells = {("transformer", "mqar", "4"): cell([100] * 5), ("lru", "mqar", "4"): cell([300] * 5),
             ("lru", "mqar", "8"): cell([800] * 5), ("transformer", "mqar", "8"): cell([200] * 5)}
    table, summary = plateau_score.score(cells, "transformer")
    lru = table[table.mixer == "lru"].set_index("rung")
    assert lru.loc["4", "ratio"] == 3 and lru.loc["4", "low"] == pytest.approx(3)
    assert lru.loc["4", "high"] == pytest.approx(3) and lru.loc["8", "ratio"] == 4
    geometric = summary.set_index("mixer").loc["lru"]
    assert geometric.first_drop_ratio == pytest.approx(math.sqrt(12)) and geometric.first_drop_cells == 2
    assert geometric.first_drop_low == pytest.approx(math.sqrt(12)) == geometric.first_drop_high


def test_censored_cells_are_bounds_not_dropped():
    # lru leaves the plateau in 2 of 5 seeds: its KM median is not reached, so the ratio is budget /
    # baseline median = 10, a lower bound. Dropping the censored runs would give 150 / 100.
    cells = {("transformer", "dyck", "2"): cell([90, 100, 100, 110, 120]),
             ("lru", "dyck", "2"): cell([140, 160, None, None, None])}
    table, summary = plateau_score.score(cells, "transformer")
    lru = table.set_index("mixer").loc["lru"]
    assert lru.ratio == pytest.approx(BUDGET / 100) and lru.bound == ">" and not lru.reached
    assert lru.high == pytest.approx(BUDGET / 90)  # the best draw for the baseline: its fastest seed
    # Both never left: the cell says nothing about the ratio and is left out of the summary.
    cells[("transformer", "dyck", "4")] = cell([None] * 5)
    cells[("lru", "dyck", "4")] = cell([None] * 5)
    table, summary = plateau_score.score(cells, "transformer")
    assert summary.set_index("mixer").loc["lru", "first_drop_cells"] == 1


def test_interval_matches_the_exact_bootstrap_distribution_by_enumeration():
    # With 3 seeds a cell, every one of the 27 × 27 resample pairs can be enumerated: the exact
    # bootstrap distribution of the log ratio. The Monte-Carlo interval's ends must sit at its 2.5%
    # and 97.5% points, up to the Monte-Carlo error.
    mine, base = [100, 250, None], [80, 120, 400]
    cells = {("m", "f", "1"): cell(mine), ("b", "f", "1"): cell(base)}
    table, _ = plateau_score.score(cells, "b", draws=20000)
    got = table.set_index("mixer").loc["m"]

    def medians(ends):
        t = np.array([BUDGET if e is None else e for e in ends], dtype=float)
        c = np.array([e is None for e in ends])
        rows = np.array(list(itertools.product(range(3), repeat=3)))
        return np.minimum(kaplan_meier_medians(t[rows], c[rows]), BUDGET)

    logs = (np.log(medians(mine))[:, None] - np.log(medians(base))[None, :]).ravel()
    for end, level in ((got.low, 0.025), (got.high, 0.975)):
        below, at_most = np.mean(logs < math.log(end) - 1e-9), np.mean(logs <= math.log(end) + 1e-9)
        assert below - 0.01 <= level <= at_most + 0.01


def test_interval_covers_the_true_ratio_under_censoring():
    # Exponential plateau ends, true median ratio 2, 8 seeds a cell, censored at a budget that cuts
    # about a fifth of the slower mixer's runs: the 95% interval covers 2 in most repetitions.
    rng = np.random.default_rng(0)
    budget, covered, repeats = 700.0, 0, 120
    for _ in range(repeats):
        slow, fast = rng.exponential(400 / math.log(2), 8), rng.exponential(200 / math.log(2), 8)
        cells = {("slow", "f", "1"): [run(t if t < budget else None, steps=int(budget)) for t in slow],
                 ("fast", "f", "1"): [run(t if t < budget else None, steps=int(budget)) for t in fast]}
        table, _ = plateau_score.score(cells, "fast", draws=500)
        row = table.set_index("mixer").loc["slow"]
        covered += row.low <= 2 <= row.high
    assert covered / repeats >= 0.85


def test_same_numbers_twice_and_an_unknown_baseline_named():
    cells = {("a", "f", "1"): cell([100, 200, 300, None]), ("b", "f", "1"): cell([50, 60, 400, 500])}
    first, second = plateau_score.score(cells, "b")[0], plateau_score.score(cells, "b")[0]
    assert first.equals(second)
    with pytest.raises(ConfigError, match="mixers: a, b"):
        plateau_score.score(cells, "transformer")
