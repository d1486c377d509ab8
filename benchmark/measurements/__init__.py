"""The registered measurements, declared without Lightning: what every reader of result rows asks for
(the leaderboard, rank, the claims, the forecast, the report), and the callbacks that record them.

A measurement is a ``Measurement`` (``emergence_bench.results.measurement``: its section, fields and
leaderboard columns). Each built-in one is declared in a module of this package that ``BUILTINS``
names, beside none of the callbacks: a callback imports its measurement's section from here, never
the other way round, so reading rows never imports the callbacks or Lightning. The registry imports
those modules when it is first read, and their order there is the leaderboard's column order. A
plugin callback's module registers its own measurement (docs/measurements.md): the registry loads the
installed callback plugins too (not the built-in callbacks), and their columns come after.
"""

from __future__ import annotations

import sys
from typing import Any

from emergence_bench import registry
from emergence_bench.results.measurement import Measurement, S

# The leaderboard's column order. recorded: the recorder's own sections (budget, final loss,
# shortcut, cells learned, speed); abruptness: read from the recorder's curves, no callback of its own.
BUILTINS = ("emergence", "plateau", "attention_probe", "influence_probe", "abruptness", "recorded", "forecast_stop")


class _Measurements(registry.Registry["Measurement[Any]"]):
    """The registered measurements: the built-ins in the order of their modules in ``BUILTINS`` (each
    module's in its own order), then the others (plugins, tests) in registration order, whichever
    module was imported first."""

    def __init__(self, kind: str, contract: type, builtins: str) -> None:
        super().__init__(kind, contract, builtins=builtins)
        self._declared: dict[str, tuple[str, int]] = {}  # name -> (declaring module, registration index)

    def declare(self, entry: Measurement[Any], module: str) -> None:
        """Adds ``entry``, declared in ``module``, at its place (sorted once here, not on each read)."""
        self.add(entry.name, entry)
        self._declared[entry.name] = (module, len(self._declared))
        builtins = self.builtin_modules()

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
        super()._load()
        registry.callbacks.load_plugins()  # a plugin callback's module declares its measurement


MEASUREMENTS = _Measurements("measurement", Measurement, builtins="emergence_bench.measurements")


def register_measurement(measurement: Measurement[S]) -> Measurement[S]:
    """Adds ``measurement`` and returns it; its name and its leaderboard columns must be new. Its
    place among the others is its module's (``_Measurements``): the caller's module is that."""
    MEASUREMENTS.declare(measurement, sys._getframe(1).f_globals.get("__name__", ""))
    return measurement


def measurements() -> tuple[Measurement[Any], ...]:
    """Every registered measurement, in ``_Measurements``' order: the built-ins and the installed
    callback plugins'."""
    return tuple(MEASUREMENTS.values())


def measurement(name: str) -> Measurement[Any]:
    """The registered measurement ``name`` (an unknown name: a KeyError naming the closest)."""
    return MEASUREMENTS.get(name)


def pattern_probes() -> tuple[Measurement[Any], ...]:
    """The measurements whose history follows the sparse pattern (attention probe, influence probe)."""
    return tuple(m for m in measurements() if m.pattern_probe)
