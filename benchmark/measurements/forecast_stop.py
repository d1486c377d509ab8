"""The forecast stop (``callbacks/forecast_stop.py`` records it): whether the forecast ended the run,
and at which eval. Its section only: the leaderboard counts forecast-stopped runs from every row
(``emergence_bench.results.row.forecast_stopped``)."""

from __future__ import annotations

from typing import TypedDict

from emergence_bench.measurements import register_measurement
from emergence_bench.results.measurement import Measurement


class ForecastStopSection(TypedDict, total=False):
    model: str  # the saved forecast's file
    window: int
    risk: float
    step: int | None  # the eval it decided at
    p_within_budget: float | None
    stopped: bool
    reason: str  # why it did not decide


FORECAST_STOP = register_measurement(Measurement("forecast_stop", section="forecast_stop", fields=ForecastStopSection,
                                                 columns=()))
