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
emerged yet (an area of 0 is no bar to fall below). A seed that diverged is censored where it
ended, as its row is. A failed run is no outcome (a resume retries it): a point with one is not
pruned, and a rival with one sets no bar. Only a point trained as one group prunes (all
its seeds at once, on one rung), because its group is what sees every seed; ``Rivals.own`` says which
runs that is, and a group holding other runs (a resumed point) trains to the end.

``Rivals`` is the seed-parallel group's stop (``emergence_bench.engine.group_stop.GroupStop``): the
group asks ``judges`` once, then ``check`` after each eval.

Measured on ladder v3's tuning (docs/speed.md, "Pruning the tuning"): 43 of 119 points pruned, every
choice, widening and "none works" unchanged, 19% fewer worker-minutes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emergence_bench.engine.group_stop import Outcome
from emergence_bench.execution.choice_rule import measure
from emergence_bench.results.store import RESULT_FILE, read_result


@dataclass
class Rivals:
    """One point's runs (``own``: their folders) and the folders of every other point of its
    (mixer, group) (``points``: one list per point, with each point's values in ``values``)."""

    own: list[str]
    points: list[list[str]]
    values: list[dict[str, Any]]
    _merits: dict[int, tuple[float, float] | None] = field(default_factory=dict)  # finished points, read once
    _warned: bool = False

    def bar(self) -> tuple[tuple[float, float], dict[str, Any]] | None:
        """The best merit among the rival points whose runs have all finished (none pruned or
        failed), with that point's values; None while none has."""
        best: tuple[tuple[float, float], dict[str, Any]] | None = None
        for i, folders in enumerate(self.points):
            if i not in self._merits:
                if not all((Path(f) / RESULT_FILE).is_file() for f in folders):
                    continue  # not finished yet: looked at again at the next eval, unread till then
                rows = [read_result(Path(f)) for f in folders]
                if any(r is None for r in rows):
                    continue  # not finished yet: read again at the next eval
                # A pruned point's merit is not its full budget's, nor a failed run's (a resume retries it).
                final = all(r is not None and not r.get("pruned") and r["status"] != "failed" for r in rows)
                self._merits[i] = _merit(rows) if final else None
            merit = self._merits[i]
            if merit is not None and (best is None or merit < best[0]):
                best = (merit, self.values[i])
        return best

    def judges(self, run_ids: set[str]) -> bool:
        """Whether a group of exactly these runs is this point: only a group training all its seeds
        (none held by another process) sees its best case."""
        return {Path(f).name for f in self.own} == run_ids

    def check(self, step: int, outcomes: list[Outcome]) -> dict | None:
        """The ``pruned`` section for a point whose seeds stand at ``outcomes`` after ``step``, when
        its best case is strictly worse than the bar; None while it may still be chosen, or where a
        seed of its own failed (a resume retries it, so the point's merit is not known). Pruning only
        saves time: a rival that cannot be read prunes nothing, and says so once."""
        states = [state for state, _ in outcomes]
        if "live" not in states or "failed" in states:
            return None
        try:
            found = self.bar()
        except Exception as error:  # (a row being replaced, a full disk): train on
            if not self._warned:
                print(f"warning: pruning off for this point, its rivals unreadable: {error}", file=sys.stderr)
                self._warned = True
            return None
        if found is None:
            return None
        (bar_area, bar_median), values = found
        best = best_case(step, outcomes)
        if best <= (bar_area, bar_median):
            return None
        return {"step": step, "by": values, "by_area": -bar_area, "by_median_emergence_step": bar_median,
                "best_case_area": -best[0], "best_case_median": best[1]}


def best_case(step: int, outcomes: list[Outcome]) -> tuple[float, float]:
    """The best merit (−area, median) the point can still reach: every live seed emerges at ``step``
    + 1. A seed that ended without emerging is censored where it ended, as its row will be. (A
    failed run is no outcome: a resume retries it, and ``Rivals.check`` prunes no point that has one.)"""
    rows: list[dict[str, Any]] = []
    for state, at in outcomes:
        if state == "failed":
            rows.append({"status": "failed"})
        elif state == "ended":
            rows.append({"status": "ok", "emergence": {"step": None}, "timing": {"steps": at}})
        else:
            emerged_at = at if state == "emerged" else step + 1
            rows.append({"status": "ok", "emergence": {"step": emerged_at}, "timing": {"steps": emerged_at}})
    return _merit(rows)


def _merit(rows: list) -> tuple[float, float]:
    return measure({}, [rows]).merit()
