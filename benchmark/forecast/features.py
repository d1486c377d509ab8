"""What a run's records say about its future, read only up to a window's end.

Every feature is computed from the entries of a result row whose step is ≤ ``window`` (the row's
later records cannot change it: tests/test_forecast.py changes them and checks). The sparse-pattern
probe is the first declared pattern probe (``emergence_bench.measurements.pattern_probes``) that the run
measured: the attention probe where the mixer has attention scores, the influence probe otherwise; a
run with neither gets the loss features only (the probe features are NaN, and a model that needs
them says so).

The features, at window end W:

- ``mass``: logit of the best head's (or layer's) mass on the true sources at the last probe ≤ W;
- ``mass_rate``: its growth, the least-squares slope of that logit over the probes in the second
  half of the window, per 1,000 steps;
- ``crossing``: log of the step at which that line reaches ``found_mass`` (the probe's "pattern
  found" mass), or of 10·W when it does not rise. It is a clock-free forecast by itself: the run's
  own growth, extrapolated, which is why it can transfer to a harder task (docs/forecast.md);
- ``entropy``: the lowest head entropy over the task's probe keys at the last probe ≤ W;
- ``loss`` and ``loss_rate``: log eval loss at the last eval ≤ W, and its slope over the second
  half of the window (per 1,000 steps);
- ``cells``: the fraction of output cells whose eval loss is already below half the chance loss.

The outcome is the log emergence step, censored at the last step the run trained (its budget, or
the step a forecast stopped it at).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from emergence_bench.measurements import pattern_probes
from emergence_bench.results.row import Row, emergence_step, section, step_budget

FEATURES = ("mass", "mass_rate", "crossing", "entropy", "loss", "loss_rate", "cells")
FOUND_MASS = 0.5  # the probes' default "pattern found" mass
_EDGE = 1e-4  # masses are clipped to [_EDGE, 1 - _EDGE] before the logit


def probe_history(row: Row) -> list[list[float]]:
    """[[step, best mass, lowest entropy], ...]: the history of the first pattern probe (in registration
    order: the attention probe, then the influence probe) that the run measured and that recorded
    one; [] when the run has none."""
    for probe in pattern_probes():
        if probe.measured(row) and (history := probe.read(row).get("history")):
            return history
    return []


def _logit(p: float) -> float:
    p = min(max(p, _EDGE), 1 - _EDGE)
    return math.log(p / (1 - p))


def _slope(steps: list[float], values: list[float]) -> float:
    """Least-squares slope per 1,000 steps; NaN with fewer than two distinct steps."""
    if len(set(steps)) < 2:
        return math.nan
    x, y = np.asarray(steps, float) / 1000, np.asarray(values, float)
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def _second_half(points: list[list[float]], window: int) -> list[list[float]]:
    """The points in (W/2, W], or the last two when fewer fall there."""
    late = [p for p in points if p[0] > window / 2]
    return late if len(late) >= 2 else points[-2:]


def window_features(row: Row, window: int) -> dict[str, float]:
    """The features of ``row`` at window end ``window`` (a step): see the module docstring."""
    features = dict.fromkeys(FEATURES, math.nan)
    probes = [p for p in probe_history(row) if p[0] <= window]
    if probes:
        logits = [[p[0], _logit(p[1])] for p in probes]
        late = _second_half(logits, window)
        rate = _slope([p[0] for p in late], [p[1] for p in late])
        features.update(mass=logits[-1][1], mass_rate=rate, entropy=probes[-1][2])
        step, now = logits[-1]
        gap = _logit(FOUND_MASS) - now
        if gap <= 0:
            crossing = max(step, 1)
        elif rate > 0:
            crossing = step + 1000 * gap / rate
        else:
            crossing = math.inf
        features["crossing"] = math.log(min(crossing, 10 * window))
    evals = [e for e in section(row, "curves").get("eval", []) if e[0] <= window and e[1] is not None]
    if evals:
        logs = [[e[0], math.log(max(e[1], 1e-8))] for e in evals]
        late = _second_half(logs, window)
        features.update(loss=logs[-1][1], loss_rate=_slope([p[0] for p in late], [p[1] for p in late]))
    cells = [c for c in section(row, "curves").get("eval_cells", []) if c[0] <= window]
    chance = section(row, "task_facts").get("chance_loss")
    if cells and chance:
        losses = cells[-1][1]
        features["cells"] = sum(loss < chance / 2 for loss in losses) / len(losses)
    return features


def outcome(row: Row) -> tuple[float, bool]:
    """(log emergence step, censored): censored at the last step the run trained (its budget, or
    where a forecast stopped it)."""
    step = emergence_step(row)
    if step is not None:
        return math.log(max(step, 1)), False
    return math.log(max(step_budget(row), 1)), True


def first_emergence(rows: Sequence[Row]) -> int | None:
    """The earliest emergence step among ``rows`` (None when none emerged)."""
    steps = [step for step in map(emergence_step, rows) if step is not None]
    return min(steps) if steps else None


def last_eval_before(rows: Sequence[Row], step: int) -> int:
    """The last eval step < ``step`` that every row recorded (the longest window ending before it)."""
    evals = sorted({e[0] for r in rows for e in section(r, "curves").get("eval", []) if e[0] < step})
    if not evals:
        raise ValueError(f"no eval before step {step}: the runs record too rarely for a forecast window")
    return int(evals[-1])


def matrix(rows: Sequence[Row], window: int, names: tuple[str, ...] = FEATURES) -> np.ndarray:
    """[n, len(names)] features of every row at ``window``."""
    return np.array([[window_features(r, window)[name] for name in names] for r in rows], dtype=float)


def outcomes(rows: Sequence[Row]) -> tuple[np.ndarray, np.ndarray]:
    """(log steps [n], censored [n])."""
    pairs = [outcome(r) for r in rows]
    return np.array([p[0] for p in pairs], float), np.array([p[1] for p in pairs], bool)
