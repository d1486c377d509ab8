"""A measurement, declared once: what a result row holds of it and how the leaderboard shows it.

A measurement is a ``Measurement`` registered with ``register_measurement``, beside the callback that
records it (``callbacks/influence_probe.py`` is the worked example, docs/measurements.md the guide).
It states:

- ``section``: the key of its section in a result row, and ``fields``: that section's TypedDict;
- ``columns``: its leaderboard columns, each a kind from ``emergence_bench.results.columns`` that
  says how a group's runs aggregate into it (a Kaplan–Meier median censored at the step budget, a
  Wilson success rate, a mean, the first value, any) and which direction is better;
- ``applies``: which runs measured it (default: those whose row has the section);
- ``figures``: the report figures that draw it, if any.

The leaderboard (its table and the human one), rank and the forecast's features read these
declarations, so a new measurement is its callback's file plus its test. The leaderboard's columns
come in registration order: ``emergence_bench.callbacks`` imports the built-in ones in that order,
and a plugin callback's module registers its own when the callbacks registry loads it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeVar, Union

from emergence_bench import registry
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


class _Measurements(registry.Registry["Measurement[Any]"]):
    """The registered measurements: the built-in callbacks' in the order of their modules in
    ``callbacks.BUILTINS`` (each module's in its own order), then the others (plugins, tests) in
    registration order, whichever module was imported first. A callback's module registers its own,
    so loading the callbacks (the built-ins and the installed plugins) loads them."""

    def __init__(self, kind: str, contract: type) -> None:
        super().__init__(kind, contract)
        self._declared: dict[str, tuple[str, int]] = {}  # name -> (declaring module, registration index)

    def declare(self, entry: Measurement[Any], module: str) -> None:
        """Adds ``entry``, declared in ``module``, at its place (sorted once here, not on each read)."""
        self.add(entry.name, entry)
        self._declared[entry.name] = (module, len(self._declared))
        builtins = registry.callbacks.builtin_modules()

        def order(name: str) -> tuple[int, int]:
            module, index = self._declared.get(name, ("", len(self._declared)))
            return (builtins.index(module) if module in builtins else len(builtins), index)

        self._entries = dict(sorted(self._entries.items(), key=lambda item: order(item[0])))

    def remove(self, name: str) -> None:
        super().remove(name)
        self._declared.pop(name, None)

    def add(self, name: str, entry: Measurement[Any]) -> Measurement[Any]:
        """As a registry adds, and its leaderboard columns must be new too."""
        taken = {column: other.name for other in self._entries.values() if other.name != name
                 for kind in other.columns for column in kind.names}
        clash = [f"{column} (of {taken[column]})" for kind in entry.columns for column in kind.names if column in taken]
        if clash:
            raise ValueError(f"measurement {name!r}: leaderboard columns already declared: {', '.join(clash)}")
        return super().add(name, entry)

    def _load(self) -> None:
        registry.callbacks.names()


MEASUREMENTS = _Measurements("measurement", Measurement)


def register_measurement(measurement: Measurement[S]) -> Measurement[S]:
    """Adds ``measurement`` and returns it; its name and its leaderboard columns must be new. Its
    place among the others is its module's (``_Measurements``): the caller's module is that."""
    MEASUREMENTS.declare(measurement, sys._getframe(1).f_globals.get("__name__", ""))
    return measurement


def measurements() -> tuple[Measurement[Any], ...]:
    """Every registered measurement, in ``_Measurements``' order: the built-in callbacks' and
    installed plugins' (loading the callbacks registers them)."""
    return tuple(MEASUREMENTS.values())


def measurement(name: str) -> Measurement[Any]:
    """The registered measurement ``name`` (an unknown name: a KeyError naming the closest)."""
    return MEASUREMENTS.get(name)


def pattern_probes() -> tuple[Measurement[Any], ...]:
    """The measurements whose history follows the sparse pattern (attention probe, influence probe)."""
    return tuple(m for m in measurements() if m.pattern_probe)
