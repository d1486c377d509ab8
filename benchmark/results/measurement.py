"""A measurement, declared once: what a result row holds of it and how the leaderboard shows it.

A measurement is a ``Measurement`` registered with ``emergence_bench.measurements.register_measurement``
(the built-in ones each in a module of ``emergence_bench.measurements``, a plugin's beside its callback;
docs/measurements.md is the guide). It states:

- ``section``: the key of its section in a result row, and ``fields``: that section's TypedDict;
- ``columns``: its leaderboard columns, each a kind from ``emergence_bench.results.columns`` that
  says how a group's runs aggregate into it (a Kaplan–Meier median censored at the step budget, a
  Wilson success rate, a mean, the first value, any) and which direction is better;
- ``applies``: which runs measured it (default: those whose row has the section);
- ``figures``: the report figures that draw it, if any.

The leaderboard (its table and the human one), rank and the forecast read the registered ones
(``emergence_bench.measurements.measurements()``), so a new measurement is one declaration plus its
test. This module is the form only: it imports neither the registry nor any measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeVar, Union

from emergence_bench.results.row import Row, SectionName, section

S = TypeVar("S", bound=Mapping[str, Any])  # a measurement's section, as its TypedDict
Better = Literal["lower", "higher"] | None  # None: neither (a count, a flag)
Shown = tuple[str, Callable[[dict[str, Any]], str]]  # a human-table column: (header, cell of a leaderboard row)
Source: TypeAlias = Union[SectionName, "Measurement[Any]"]  # where a column reads its fields: section(row, source)


class Column(Protocol):
    """One or more leaderboard columns of a measurement (``emergence_bench.results.columns``)."""

    @property
    def better(self) -> Better:
        """Which direction of its main column is better (None: neither)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The leaderboard columns it adds, in order."""

    def aggregate(self, runs: Sequence[Row], source: Source) -> dict[str, Any]:
        """Its columns' values over ``runs`` (a group's runs that measured it), their fields read from
        ``section(run, source)``: the measurement's section."""

    def shown(self, rows: list[dict[str, Any]]) -> list[Shown]:
        """Its columns of the human table for these leaderboard ``rows`` (none, or only where some row
        has a value)."""


def every_run(row: Row) -> bool:
    """``applies`` for a measurement every trained run takes part in: a run without its section counts
    as never getting there (censored), not as left out."""
    return True


@dataclass(frozen=True)
class Measurement(Generic[S]):
    """See the module docstring. ``runs``: which of a group's runs it aggregates, the trained ones
    (ok or diverged) or all (a failed run was timed too); ``applies`` then keeps those that measured
    it. ``pattern_probe``: its section's ``history`` is [[step, best mass on the true sources, lowest
    entropy]] per probe, which the forecast reads (the first registered probe that applies)."""

    name: str
    section: str
    fields: type[S]
    columns: tuple[Column, ...]
    applies: Callable[[Row], bool] | None = None  # None: the runs whose row has the section
    runs: Literal["trained", "all"] = "trained"
    figures: tuple[str, ...] = ()  # names in emergence_bench.reporting.figure.REGISTRY
    pattern_probe: bool = False

    def measured(self, row: Row) -> bool:
        """Whether ``row`` measured it."""
        return self.applies(row) if self.applies is not None else bool(section(row, self))

    def read(self, row: Row) -> S:
        """The run's section of it, ``{}`` where the row has none."""
        return section(row, self)

    def aggregate(self, members: Sequence[Row]) -> dict[str, Any]:
        """Its leaderboard columns over a group's ``members``."""
        runs = [r for r in members if self.measured(r) and (self.runs == "all" or r["status"] in ("ok", "diverged"))]
        return {name: value for column in self.columns for name, value in column.aggregate(runs, self).items()}
