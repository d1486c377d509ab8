"""Pruning a tuning: a grid point's runs stop as soon as the choice rule can no longer pick it.

The rule (``execution/tuning.py``) compares points by merit: the success area, then the
Kaplan–Meier median emergence step, then the smaller value. At an eval of step t, a point whose
seeds are partly known has a best case: every seed still training emerges at step t + 1. When even
that best case is strictly worse than the merit of a rival point of the same (mixer, group) whose runs
have all finished, no outcome of the rest can make the rule choose it. Nor can it change which point
is chosen, or whether the grid widens (the chosen point is at least as good as that rival, so it is
strictly better than the pruned point, as it would have been after the full budget). So the point's
seeds stop there, and their rows say so in a ``pruned`` section; their emergence is censored at that
step.

A point never prunes against a tie (the tie-break might still pick it), so never where nothing has
emerged yet (an area of 0 is no bar to fall below). Only a point trained as one group prunes (all
its seeds at once, on one rung), because its group is what sees every seed; ``Rivals.own`` says which
runs that is, and a group holding other runs (a resumed point) trains to the end.

Exactness in numbers: pruning the ladder-v3 tuning (simulated on its rows, middle grid values first)
would cut its 72.7 worker-minutes to 55.2 with every choice unchanged (docs/speed.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emergence_bench.execution.choice_rule import measure
from emergence_bench.results import read_result

if TYPE_CHECKING:  # the sweep's own process reads rivals without importing the engine
    from emergence_bench.engine.seeds import Outcome


@dataclass
class Rivals:
    """One point's runs (``own``: their folders) and the folders of every other point of its
    (mixer, group) (``points``: one list per point, with each point's values in ``values``)."""

    own: list[str]
    points: list[list[str]]
    values: list[dict[str, Any]]
    _merits: dict[int, tuple[float, float] | None] = field(default_factory=dict)  # finished points, read once

    def to_dict(self) -> dict:
        return {"own": self.own, "points": self.points, "values": self.values}

    @classmethod
    def from_dict(cls, data: dict) -> Rivals:
        return cls(list(data["own"]), [list(p) for p in data["points"]], list(data["values"]))

    def bar(self) -> tuple[tuple[float, float], dict[str, Any]] | None:
        """The best merit among the rival points whose runs have all finished (none pruned), with
        that point's values; None while none has."""
        best: tuple[tuple[float, float], dict[str, Any]] | None = None
        for i, folders in enumerate(self.points):
            if i not in self._merits:
                rows = [read_result(Path(f)) for f in folders]
                if any(r is None for r in rows):
                    continue  # not finished yet: read again at the next eval
                self._merits[i] = None if any(r.get("pruned") for r in rows if r) else _merit(rows)
            merit = self._merits[i]
            if merit is not None and (best is None or merit < best[0]):
                best = (merit, self.values[i])
        return best

    def check(self, step: int, outcomes: list[Outcome]) -> dict | None:
        """The ``pruned`` section for a point whose seeds stand at ``outcomes`` after ``step``, when
        its best case is strictly worse than the bar; None while it may still be chosen."""
        found = self.bar()
        if found is None or not any(state == "live" for state, _ in outcomes):
            return None
        (bar_area, bar_median), values = found
        best = best_case(step, outcomes)
        if best <= (bar_area, bar_median):
            return None
        return {"step": step, "by": values, "by_area": -bar_area, "by_median_emergence_step": bar_median,
                "best_case_area": -best[0], "best_case_median": best[1]}


def best_case(step: int, outcomes: list[Outcome]) -> tuple[float, float]:
    """The merit (−area, median) the point reaches if every live seed emerges at ``step`` + 1."""
    rows: list[dict[str, Any]] = []
    for state, emerged_at in outcomes:
        if state == "failed":
            rows.append({"status": "failed"})
        elif state == "ended":
            rows.append({"status": "ok", "emergence": {"step": None}, "timing": {"steps": step}})
        else:
            rows.append({"status": "ok", "emergence": {"step": emerged_at if state == "emerged" else step + 1},
                         "timing": {"steps": step}})
    return _merit(rows)


def _merit(rows: list) -> tuple[float, float]:
    return measure({}, [rows]).merit()


def encode(rivals: Rivals | None) -> str | None:
    """Rivals as a worker's argument (plain JSON)."""
    return None if rivals is None else json.dumps(rivals.to_dict())


def decode(text: str | None) -> Rivals | None:
    return None if text is None else Rivals.from_dict(json.loads(text))
