"""The influence probe (``callbacks/influence_probe.py`` records it): the attention probe's question
for any mixer, answered by perturbation; docs/measurements.md walks through this declaration."""

from __future__ import annotations

from typing import TypedDict

from emergence_bench.measurements import register_measurement
from emergence_bench.results.columns import Median
from emergence_bench.results.measurement import Measurement


class InfluenceProbeSection(TypedDict, total=False):
    """The ``influence_probe`` section of a result row (``InfluenceProbe.report``)."""

    found_mass: float
    pattern_found_step: int | None  # the first probed eval at ≥ found_mass; None: never (censored)
    censored: bool
    final_entropy: list[float]  # per layer, at the last probe
    final_mass: list[float]
    history: list[list[float]]  # [step, best mass, lowest entropy] per probed eval


# The measurement, declared once: its section, its leaderboard column (the Kaplan–Meier median of
# pattern_found_step over the runs that ran the probe, censored at the step budget; shown only where
# some run did) and its history, which the forecast reads where a mixer has no attention scores.
INFLUENCE_PROBE = register_measurement(Measurement(
    "influence_probe", section="influence_probe", fields=InfluenceProbeSection,
    columns=(Median("median_influence_found", "pattern_found_step", measured="influence_probed",
                    header="median influence found", absent="-", optional=True),),
    pattern_probe=True))
