"""Claim 8: pre-pre-training on formal languages (Dyck) or neural cellular automata may speed up
emergence.

The ``curricula`` group trains a stage of Dyck or of neural cellular automata before the linear
map, at matched total steps (the stage's steps come out of the target's budget); its twin without a
curriculum is the ``emergence`` group's rows. Per curriculum, the emergence step on the target
(counted from the target's first step) against no curriculum. The paper says "may": the test is
two-sided, and the prediction is "sooner".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from emergence_bench.claim import Claim, NotApplicable, Outcome, Rows, register_claim
from emergence_bench.claims import compare
from emergence_bench.claims.design import frozen


def stage_task(row: Mapping[str, Any]) -> str | None:
    """The task of the run's first curriculum stage (None: no curriculum)."""
    stages = row["config"].get("curriculum") or []
    return stages[0]["task"]["name"] if stages else None


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    none = [r for r in rows["emergence"] if stage_task(r) is None]
    if not none:
        return {"": NotApplicable("no run without a curriculum")}
    tasks = sorted({t for t in map(stage_task, rows["curricula"]) if t})
    return {f"after {task}": compare.times([r for r in rows["curricula"] if stage_task(r) == task], none,
                                           "emergence", "step", (f"after {task}", "none"), predicts="shorter")
            for task in tasks}


CURRICULA = register_claim(Claim(
    "curricula", 8, paper="Pre-pre-training on formal languages (Dyck) or neural cellular automata may speed up "
    "emergence.", paper_number="-", groups=("curricula", "emergence"), statistic="log-rank test of the emergence step",
    effect="KM median emergence step on the target, after the curriculum over none", predicts="shorter after it",
    settings=frozen(stage_steps=300, matched_total=True), evaluate=evaluate))
