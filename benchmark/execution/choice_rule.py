"""The tuning's choice rule (execution/tuning.py runs the tuning): a grid point's merit from its
runs, the rule's choice among points, and the edges past which the grid grows.

Per (mixer, group) over the grid's points: the highest success area (the mean success rate over
the tuning rungs; a diverged run counts as not emerged, a failed one is left out), then the lowest
Kaplan–Meier median emergence step (not reached is worst), then the smaller values (the grid's keys
in order). A point on the edge of a positive, numeric axis that is *strictly* better than its inner
neighbour (area or median, not only the tie-break) says the best may lie beyond it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, cast

from emergence_bench.config import ConfigError
from emergence_bench.results.row import ResultRow, emergence_step, step_budget
from emergence_bench.stats.medians import kaplan_meier_median, wilson_interval


@dataclass
class Point:
    """One grid point of one (mixer, group): its values and what its tuning runs measured."""

    values: dict[str, Any]
    runs: int = 0  # measured runs (ok or diverged)
    failed: int = 0
    emerged: int = 0
    area: float | None = None  # mean success rate over the tuning rungs; None: nothing measured
    median_emergence_step: float | None = None  # Kaplan–Meier, censored at the budget; None: not reached
    rung_rates: list[float] = field(default_factory=list)
    pruned: dict | None = None  # the ``pruned`` section of its runs that stopped early (execution/pruning.py)

    def merit(self) -> tuple[float, float]:
        """What the rule compares before the tie-break, smaller is better: (−area, median step)."""
        area = -1.0 if self.area is None else self.area
        return -area, math.inf if self.median_emergence_step is None else self.median_emergence_step

    def key(self) -> tuple:
        """The whole rule as a sort key: merit, then the smaller values in the grid's key order."""
        return (*self.merit(), *(_order(v) for v in self.values.values()))

    def to_dict(self) -> dict:
        low, high = wilson_interval(self.emerged, self.runs) if self.runs else (None, None)
        return {"values": self.values, "runs": self.runs, "failed": self.failed, "emerged": self.emerged,
                "area": self.area, "area_low": low, "area_high": high,
                "median_emergence_step": self.median_emergence_step, "pruned": self.pruned}


def _order(value: Any) -> Any:
    return value if isinstance(value, (int, float)) else json.dumps(value, sort_keys=True, default=str)


def measure(values: dict[str, Any], by_rung: list[list[ResultRow]]) -> Point:
    """A point from its runs, one list per tuning rung."""
    point = Point(values=values)
    rates, times, censored = [], [], []
    for records in by_rung:
        measured = [r for r in records if r["status"] in ("ok", "diverged")]
        point.failed += len(records) - len(measured)
        point.runs += len(measured)
        emerged = [emergence_step(r) for r in measured]
        point.emerged += sum(step is not None for step in emerged)
        if measured:
            rates.append(sum(step is not None for step in emerged) / len(measured))
        for record, step in zip(measured, emerged):
            times.append(float(step) if step is not None else float(step_budget(record)))
            censored.append(step is None)
            point.pruned = point.pruned or cast(dict | None, record.get("pruned"))
    if rates and len(rates) == len(by_rung):
        point.area, point.rung_rates = sum(rates) / len(rates), rates
        point.median_emergence_step = kaplan_meier_median(times, censored)
    return point


def choose(points: list[Point]) -> Point:
    """The rule's choice among ``points``: best area, then lowest median emergence step, then smaller
    values. Raises ConfigError when no point was measured."""
    measured = [p for p in points if p.area is not None]
    if not measured:
        raise ConfigError("no tuning point has a measured run (every run failed): see the tuning runs' errors")
    return min(measured, key=Point.key)


def widenable(values: list) -> bool:
    """An axis the grid may grow along: at least two distinct positive numbers (a log-spaced axis)."""
    return len(set(values)) >= 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                         for v in values)


def edges(points: list[Point], chosen: Point) -> dict[str, str]:
    """key -> "low" or "high" for each widenable axis where ``chosen`` sits on the grid's edge and is
    strictly better (by merit, not the tie-break) than its inner neighbour, the other keys equal."""
    found = {}
    for key in chosen.values:
        axis = sorted({p.values[key] for p in points})
        if not widenable(axis):
            continue
        value = chosen.values[key]
        for side, edge, inner in (("low", axis[0], axis[1]), ("high", axis[-1], axis[-2])):
            if value != edge:
                continue
            neighbour = next((p for p in points if p.values[key] == inner and p.area is not None
                              and all(p.values[k] == v for k, v in chosen.values.items() if k != key)), None)
            if neighbour is not None and chosen.merit() < neighbour.merit():
                found[key] = side
    return found


def widened(axis: list, side: str) -> float:
    """The next value past ``axis``'s ``side`` edge: the value two steps in, times the ratio over those
    two steps (1e-3, 3e-3, 1e-2 → 3e-2; a geometric grid continues as it is), or with two values
    their ratio once more."""
    axis = sorted(set(axis))
    if side == "high":
        value = axis[-2] * axis[-1] / axis[-3] if len(axis) >= 3 else axis[-1] ** 2 / axis[0]
    else:
        value = axis[1] * axis[0] / axis[2] if len(axis) >= 3 else axis[0] ** 2 / axis[1]
    return float(f"{value:.3g}")
