"""Claim 8: pre-pre-training on formal languages (Dyck) or neural cellular automata may speed up
emergence.

The ``curricula`` group trains a stage of Dyck or of neural cellular automata before the linear
map, at matched total steps (the stage's steps come out of the target's budget); its twin without a
curriculum is the ``emergence`` group's rows. Per curriculum, the step at which the target emerged,
counted from the first step of the curriculum (the stage's steps added, so both arms end at the same
total), against no curriculum. The paper says "may": the test is
two-sided, and the prediction is "sooner".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from emergence_bench.claims import compare
from emergence_bench.claims.claim import Claim, NotApplicable, Outcome, Rows, register_claim
from emergence_bench.claims.design import frozen
from emergence_bench.measurements.emergence import EMERGENCE
from emergence_bench.results.row import section, step_budget


def stage_task(row: Mapping[str, Any]) -> str | None:
    """The task of the run's first curriculum stage (None: no curriculum)."""
    stages = row["config"].get("curriculum") or []
    return stages[0]["task"]["name"] if stages else None


def total_steps(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row with its emergence step and budget counted from the curriculum's first step (the stage's
    steps added), so an arm with a curriculum and one without compare at matched total steps."""
    stages = sum(stage["steps"] for stage in row["config"].get("curriculum") or [])
    emergence, timing = EMERGENCE.read(row), section(row, "timing")
    step = emergence.get("step")
    return {**row, "emergence": {**emergence, "step": None if step is None else step + stages},
            "timing": {**timing, "steps": step_budget(row) + stages}}


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    none = [r for r in rows["emergence"] if stage_task(r) is None]
    if not none:
        return {"": NotApplicable("no run without a curriculum")}
    tasks = sorted({t for t in map(stage_task, rows["curricula"]) if t})
    if not tasks:
        return {"": NotApplicable("no run with a curriculum")}
    return {f"after {task}": compare.times([total_steps(r) for r in rows["curricula"] if stage_task(r) == task], none,
                                           "emergence", "step", (f"after {task}", "none"), predicts="shorter")
            for task in tasks}


CURRICULA = register_claim(Claim(
    "curricula", 8, paper="Pre-pre-training on formal languages (Dyck) or neural cellular automata may speed up "
    "emergence.", paper_number="-", groups=("curricula", "emergence"), statistic="log-rank test of the emergence step",
    effect="KM median emergence step counted from the first step of training (stage included), after the "
    "curriculum over none", predicts="shorter after it",
    settings=frozen(stage_steps=300, matched_total=True), evaluate=evaluate))
