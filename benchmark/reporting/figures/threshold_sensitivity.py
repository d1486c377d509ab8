"""Threshold sensitivity: the median emergence step and plateau end against the thresholds that
define them (drawn by ``emergence_bench.reporting.thresholds``)."""

from __future__ import annotations

from emergence_bench.reporting.figure import from_groups, register_figure
from emergence_bench.reporting.thresholds import threshold_figure


register_figure("thresholds", "Threshold sensitivity",
                "Left: each group's median emergence step (Kaplan–Meier over seeds) against the accuracy threshold τ, "
                "as a fraction of the task's reachable accuracy; right: its median plateau end against the loss "
                "threshold, the fraction f of the way from chance (or the shortcut baseline) to the floor. Dashed: the "
                "thresholds the runs used. A conclusion that holds along the whole curve does not depend on the "
                "threshold; a missing point is a median not reached (runs that stopped at their emergence are "
                "censored there for a higher τ). The plateau curve reads the recorded train-loss means, not the "
                "callback's EMA, so at its own f it can differ from the leaderboard by a few steps.",
                "no run recorded eval curves")(
    from_groups(threshold_figure, "threshold-sensitivity"))
