"""A task family's difficulty ladder, read from its runs: the one numeric ``task.`` key that varies
among them, and its values (the rungs), harder as they rise."""

from __future__ import annotations

import json
from typing import Any

from emergence_bench.config import ConfigError, hashed_config
from emergence_bench.reporting.leaderboard import flatten
from emergence_bench.results.row import ResultRow


def ladders(records: list[ResultRow], axes: dict[str, str] | None = None) -> dict[str, dict]:
    """family -> {"axis": dotted key, "rungs": sorted values}: the one numeric ``task.`` key that
    varies within the family (or ``axes[family]``); a family whose task never varies has one rung
    (axis None). Raises ConfigError when several keys vary and none was named."""
    axes = axes or {}
    families: dict[str, list[dict]] = {}
    for r in records:
        families.setdefault(r["config"]["task"]["name"], []).append(flatten(hashed_config(r["config"])))
    found = {}
    for family, flats in families.items():
        varying = sorted(k for k in {k for f in flats for k in f} if k.startswith("task.")
                         and len({json.dumps(f.get(k), default=str) for f in flats}) > 1)
        axis = axes.get(family)
        if axis is None:
            numeric = [k for k in varying if all(isinstance(f.get(k), (int, float)) for f in flats)]
            if len(varying) > 1 or (varying and not numeric):
                raise ConfigError(f"task family {family!r} varies in {', '.join(varying)}: name its ladder with "
                                  f"--rung {family}=KEY (one numeric task key)")
            axis = numeric[0] if numeric else None
        elif axis not in varying:
            raise ConfigError(f"--rung {family}={axis}: {axis} does not vary among the {family} runs "
                              f"(varying: {', '.join(varying) or 'none'})")
        rungs: set[Any] = {f.get(axis) for f in flats} if axis else {None}
        found[family] = {"axis": axis, "rungs": sorted(rungs)}
    return found
