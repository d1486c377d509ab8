"""Emergence (``callbacks/emergence.py`` records it): the first eval step at which greedy accuracy on
the scored tokens reaches τ, overall and per output cell."""

from __future__ import annotations

from typing import TypedDict

from emergence_bench.measurements import register_measurement
from emergence_bench.results.columns import Median, SuccessRate
from emergence_bench.results.measurement import Measurement, every_run


class EmergenceSection(TypedDict, total=False):
    threshold: float  # τ, the accuracy used
    requested_threshold: float
    relative: bool
    max_accuracy: float
    stopped: bool
    step: int | None  # None: never reached within the budget (censored)
    censored: bool
    per_position: list[int | None]  # step per output cell
    history: list[list[float]]  # [step, accuracy] per eval


# Success: the runs that reached τ within their budget; time: when. A run without the section (the
# callback switched off) never emerged, so every trained run takes part.
EMERGENCE = register_measurement(Measurement(
    "emergence", section="emergence", fields=EmergenceSection, applies=every_run,
    columns=(SuccessRate("emerged", "success_rate", ("success_low", "success_high"), field="step",
                         header="success (95% CI)"),
             Median("median_emergence_step", "step", interval=("emergence_low", "emergence_high"),
                    header="median emergence (95% CI)", ratios="emergence")),
    figures=("curves", "staircase", "seeds", "axes", "thresholds")))
