"""ForecastStop: end a run the forecast says will not emerge within its budget.

At the first eval at or after the model's window (the step its features were fitted at), the run's
records so far give the features (``emergence_bench.forecast.features``, read exactly as
``emergence-bench forecast`` reads a finished row), the saved model gives P(emergence ≤ budget),
and the run stops when that is below ``risk``. The row says so in its ``forecast_stop`` section;
its emergence is censored at the step it stopped, so the leaderboard counts it as forecast-stopped,
never as a failure. One decision per run, at the window the forecast was validated at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L

from emergence_bench.callbacks.contract import MeasuredModule
from emergence_bench.forecast.stop import decide
from emergence_bench.forecast.survival import LogNormalAFT
from emergence_bench.measurements import pattern_probes
from emergence_bench.registry import register_callback
from emergence_bench.tasks.base import SyntheticTask


@register_callback("forecast_stop")
class ForecastStop(L.Callback):
    """``model``: a file written by ``emergence-bench forecast --save``; ``risk``: stop when the
    forecast probability of emerging within the budget is below it."""

    def __init__(self, task: SyntheticTask, model: str, risk: float = 0.05) -> None:
        if not 0 < risk < 1:
            raise ValueError(f"forecast_stop.risk must be in (0, 1), got {risk}")
        try:
            saved = json.loads(Path(model).read_text())
            self.model, self.window = LogNormalAFT.from_dict(saved["model"]), int(saved["window"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"forecast_stop.model: cannot read a saved forecast from {model} ({error}); "
                             "write one with `emergence-bench forecast DIR --save FLEET=PATH`") from error
        self.task, self.risk, self.path = task, risk, model
        self.decision: dict | None = None

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or self.decision is not None:
            return
        step = pl_module.last_eval.step
        if step < self.window:
            return
        emergence = next((c for c in trainer.callbacks if getattr(c, "registered_name", "") == "emergence"), None)
        if emergence is not None and emergence.report()["step"] is not None:  # a success: nothing to stop
            self.decision = {"step": step, "p_within_budget": None, "stopped": False, "reason": "emerged by then"}
            return
        self.decision = decide(self.model, self._records(trainer, pl_module), step, trainer.max_steps, self.risk)
        if self.decision["stopped"]:
            trainer.should_stop = True

    def _records(self, trainer: Any, pl_module: MeasuredModule) -> dict:
        """The run's records up to now, in a result row's shape (what features read)."""
        row: dict = {"task_facts": {"chance_loss": float(self.task.chance_loss)}}
        recorder = next((c for c in trainer.callbacks if hasattr(c, "eval_curve")), None)
        e = pl_module.last_eval
        assert e is not None  # called at an eval, after it
        evals = [list(p) for p in getattr(recorder, "eval_curve", []) if p[0] < e.step]
        evals.append([e.step, e.loss, e.accuracy])
        cells = [list(p) for p in getattr(recorder, "cell_curve", []) if p[0] < e.step]
        cells.append([e.step, e.cell_loss.tolist()])
        row["curves"] = {"eval": evals, "eval_cells": cells}
        probes = {probe.section for probe in pattern_probes()}
        for callback in trainer.callbacks:
            name = getattr(callback, "registered_name", "")
            if name in probes and callable(getattr(callback, "report", None)):
                row[name] = callback.report()
        return row

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        names = [getattr(c, "registered_name", "") for c in trainer.callbacks]
        mine = next(i for i, c in enumerate(trainer.callbacks) if c is self)
        probes = {probe.section for probe in pattern_probes()}
        if any(name in probes for name in names[mine + 1:]):
            raise ValueError("forecast_stop must come after the probes in callbacks: it reads their record of "
                             "this eval")

    def report(self) -> dict:
        decided = self.decision or {"step": None, "p_within_budget": None, "stopped": False}
        return {"model": self.path, "window": self.window, "risk": self.risk, **decided}

    def state_dict(self) -> dict:
        return {"decision": self.decision}

    def load_state_dict(self, state: dict) -> None:
        self.decision = state["decision"]
