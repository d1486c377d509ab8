"""The kinds of leaderboard column a measurement declares (``emergence_bench.results.measurement``): how a
group's runs aggregate into it, which direction is better, and its cells in the human table.

- ``Median``: the Kaplan–Meier median step of a field, with a run that never got there censored at
  its step budget (optionally its 95% interval, a flag for "some run measured it", and its ratios to
  the row without interventions and to a ``--baseline`` row);
- ``SuccessRate``: how many runs reached the field's step, with a 95% Wilson interval;
- ``Mean``, ``First``, ``AnyOf``: the mean, the first value, whether any run's value is true;
- ``Computed``: columns a function of the runs computes (the step budget, the cells learned).

Each kind's ``aggregate(runs, source)`` gets the group's runs that measured it and where their
fields are (``section(run, source)``: the measurement's section). Values are plain Python, None where
nothing was measured; a human cell is text ("-" or "n/a" for none, ">budget" for a median not reached).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from emergence_bench.results.measurement import Better, Shown, Source
from emergence_bench.results.row import Row, forecast_stopped, section, step_budget
from emergence_bench.stats.medians import kaplan_meier_median, kaplan_meier_median_ci, wilson_interval

BUDGET = "budget"  # the leaderboard column with a group's step budget (declared by the recorder)


def km_time(records: Sequence[Row], source: Source, key: str) -> dict[str, Any]:
    """Kaplan–Meier median (and 95% interval) of ``section(record, source)[key]``, each run that never
    got there censored at its step budget: {median, low, high, budget: the largest budget, measured:
    whether some run has the section}."""
    times, censored, budgets = [], [], []
    for r in records:
        value = section(r, source).get(key)
        budget = step_budget(r)
        times.append(value if value is not None else budget)
        censored.append(value is None)
        budgets.append(budget)
    low, high = kaplan_meier_median_ci(times, censored)
    return {"median": kaplan_meier_median(times, censored), "low": low, "high": high,
            "budget": max(budgets, default=0), "measured": any(section(r, source) for r in records)}


def missing(value: Any) -> bool:
    """None or NaN (what a table cell holds where nothing was measured)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def median_cell(value: Any, budget: Any, low: Any = None, high: Any = None, interval: bool = False) -> str:
    """``300``, or ``>1000`` where the median was not reached within the budget; ``300 (200–>1000)``
    with its interval."""
    def step(v: Any) -> str:
        return f">{budget}" if missing(v) else f"{int(v)}"

    return f"{step(value)} ({step(low)}–{step(high)})" if interval else step(value)


def ratio_cell(ratio: Any, bound: Any) -> str:
    """``0.50×``, ``<0.30×`` or ``>2.50×`` (a bound where a median was not reached); ``-`` for none."""
    if missing(ratio):
        return "-"
    return ("" if bound == "=" else bound) + f"{ratio:.2f}×"


def number_cell(value: Any, spec: str = ".3g") -> str:
    return "-" if missing(value) else f"{value:{spec}}"


@dataclass(frozen=True)
class Median:
    """``name``: the Kaplan–Meier median of the runs' ``field`` (a step; None: never got there,
    censored at the run's budget). ``interval``: the names of its 95% interval's columns.
    ``measured``: a column saying whether some run of the group has the section; where none has, the
    human cell reads ``absent``. ``header``: its human column (``optional``: shown only where some
    row measured it). ``note``: (a boolean column, text added to the human cell where it is true).
    ``ratios``: a label that adds, with ``--baseline``, ``{label}_vs_baseline`` (and ``_bound``):
    this median over the baseline row's; with ``against_none`` also ``{label}_ratio``: an
    intervention row's median over that of its row without interventions ("plateau vs none")."""

    name: str
    field: str
    interval: tuple[str, str] | None = None
    measured: str | None = None
    header: str | None = None
    absent: str = "n/a"
    optional: bool = False
    note: tuple[str, str] | None = None
    ratios: str | None = None
    against_none: bool = False
    better: Better = "lower"  # sooner

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *(self.interval or ()), *((self.measured,) if self.measured else ()))

    def aggregate(self, runs: Sequence[Row], source: Source) -> dict[str, Any]:
        time = km_time(runs, source, self.field)
        values = {self.name: time["median"]}
        if self.interval:
            values.update(zip(self.interval, (time["low"], time["high"])))
        if self.measured:
            values[self.measured] = time["measured"]
        return values

    def reached(self, row: Row, source: Source) -> bool:
        """Whether the run got there within its budget."""
        return section(row, source).get(self.field) is not None

    def shown(self, rows: list[dict[str, Any]]) -> list[Shown]:
        if self.header is None or (self.optional and self.measured and not any(row[self.measured] for row in rows)):
            return []
        columns: list[Shown] = [(self.header, self.cell)]
        if self.against_none:
            columns.append((f"{self.ratios} vs none",
                            lambda row: ratio_cell(row[f"{self.ratios}_ratio"], row[f"{self.ratios}_ratio_bound"])))
        return columns

    def cell(self, row: dict[str, Any]) -> str:
        if self.measured and not row[self.measured]:
            return self.absent
        low, high = (row[c] for c in self.interval) if self.interval else (None, None)
        text = median_cell(row[self.name], row[BUDGET], low, high, interval=self.interval is not None)
        return text + (self.note[1] if self.note and row[self.note[0]] else "")


@dataclass(frozen=True)
class SuccessRate:
    """``count``: the runs whose ``field`` (a step) is set, i.e. that got there within the budget;
    ``rate``: that over the runs with a known outcome (a run a forecast stopped has none: it is left
    out here, and censored in the medians); ``interval``: the rate's 95% Wilson interval's columns."""

    count: str
    rate: str
    interval: tuple[str, str]
    field: str
    header: str | None = None
    better: Better = "higher"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.count, self.rate, *self.interval)

    def aggregate(self, runs: Sequence[Row], source: Source) -> dict[str, Any]:
        known = [r for r in runs if not forecast_stopped(r)]
        reached = sum(1 for r in known if section(r, source).get(self.field) is not None)
        low, high = wilson_interval(reached, len(known))
        return {self.count: reached, self.rate: reached / len(known) if known else None,
                self.interval[0]: low, self.interval[1]: high}

    def shown(self, rows: list[dict[str, Any]]) -> list[Shown]:
        return [] if self.header is None else [(self.header, self.cell)]

    def cell(self, row: dict[str, Any]) -> str:
        """``2/3 (0.21–0.94)``: reached over the runs with a known outcome, and the interval."""
        if missing(row[self.rate]):
            return "-"
        known = row["seeds"] - row["failed"] - row["forecast_stopped"]
        low, high = (row[c] for c in self.interval)
        return f"{row[self.count]}/{known} ({low:.2f}–{high:.2f})"


@dataclass(frozen=True)
class Mean:
    """``name``: the mean of the runs' ``field`` where it is not None (None where no run has one);
    ``only``: which runs count (default: all that measured it). ``spec``: the human cell's format."""

    name: str
    field: str
    better: Better
    header: str | None = None
    only: Callable[[Row], bool] | None = None
    spec: str = ".3g"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def aggregate(self, runs: Sequence[Row], source: Source) -> dict[str, Any]:
        values = [section(r, source)[self.field] for r in runs
                  if (self.only is None or self.only(r)) and section(r, source).get(self.field) is not None]
        return {self.name: sum(values) / len(values) if values else None}

    def shown(self, rows: list[dict[str, Any]]) -> list[Shown]:
        return [] if self.header is None else [(self.header, lambda row: number_cell(row[self.name], self.spec))]


@dataclass(frozen=True)
class First:
    """``name``: the first run's ``field`` that is not None (a fact all the group's runs share)."""

    name: str
    field: str
    better: Better
    header: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def aggregate(self, runs: Sequence[Row], source: Source) -> dict[str, Any]:
        values = [section(r, source)[self.field] for r in runs if section(r, source).get(self.field) is not None]
        return {self.name: values[0] if values else None}

    def shown(self, rows: list[dict[str, Any]]) -> list[Shown]:
        return [] if self.header is None else [(self.header, lambda row: number_cell(row[self.name]))]


@dataclass(frozen=True)
class AnyOf:
    """``name``: whether some run's ``field`` is true, read from ``section`` when given (a fact of
    another section that this measurement's reading needs, e.g. the plateau's ``measures_shortcut``)."""

    name: str
    field: str
    section: Source | None = None
    better: Better = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def aggregate(self, runs: Sequence[Row], source: Source) -> dict[str, Any]:
        where = source if self.section is None else self.section
        return {self.name: any(section(r, where).get(self.field) for r in runs)}

    def shown(self, rows: list[dict[str, Any]]) -> list[Shown]:
        return []


@dataclass(frozen=True)
class Computed:
    """``names``: columns that ``compute(runs)`` gives (as a dict) where no kind above fits.
    ``header`` and ``cell``: its human column, shown where ``show(rows)`` (default: always)."""

    names: tuple[str, ...]
    compute: Callable[[Sequence[Row]], dict[str, Any]]
    better: Better = None
    header: str | None = None
    cell: Callable[[dict[str, Any]], str] | None = None
    show: Callable[[list[dict[str, Any]]], bool] | None = None

    def aggregate(self, runs: Sequence[Row], source: Source) -> dict[str, Any]:
        return self.compute(runs)

    def shown(self, rows: list[dict[str, Any]]) -> list[Shown]:
        if self.header is None or self.cell is None or (self.show is not None and not self.show(rows)):
            return []
        return [(self.header, self.cell)]
