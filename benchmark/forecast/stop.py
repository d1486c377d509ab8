"""The forecast stop's one decision, made alike by the live callback (callbacks/forecast_stop.py)
and by its replay on finished runs (``evaluate.replay_stop``)."""

from __future__ import annotations

import math

from emergence_bench.forecast.features import window_features
from emergence_bench.forecast.survival import LogNormalAFT
from emergence_bench.results.row import Row


def decide(model: LogNormalAFT, records: Row, step: int, budget: int, risk: float) -> dict:
    """From ``records`` up to ``step``: stop when P(emergence ≤ budget) < ``risk``. A feature the model
    needs that cannot be read there (no probe, too few evals) leaves the run going, saying why."""
    features = window_features(records, step)
    missing = [name for name in model.features if math.isnan(features[name])]
    if missing:
        return {"step": step, "p_within_budget": None, "stopped": False,
                "reason": f"not decided: {', '.join(missing)} unreadable at step {step}"}
    p = float(model.p_within([[features[name] for name in model.features]], budget)[0])
    return {"step": step, "p_within_budget": p, "stopped": p < risk}
