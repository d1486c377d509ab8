"""Plateau: the loss held at one level until its last sharp drop (the paper's plateau), and the first
drop from chance.

The plateau's end (``end_step``) is the held plateau's (``emergence_bench.stats.held_plateau``), read on
the train loss averaged over every ``CURVE_EVERY`` steps, the curve the recorder keeps. The first
drop (``first_drop_step``) is the first step the smoothed loss falls below a threshold just under
chance: on most tasks the fall to a shortcut's level, tens of steps in, long before the pattern is
found. Rows of schema 2 named the first drop ``end_step``; they are upgraded when read
(``emergence_bench.results.store``). Its section and leaderboard columns:
``emergence_bench.measurements.plateau``."""

from __future__ import annotations

import warnings
from functools import cached_property
from typing import TYPE_CHECKING, Any

import lightning as L

from emergence_bench.registry import register_callback
from emergence_bench.stats.held_plateau import plateau_fields

if TYPE_CHECKING:
    from emergence_bench.tasks.base import SyntheticTask

CURVE_EVERY = 10  # steps per point of the curve the held plateau is read on (the recorder's)


@register_callback("plateau")
class Plateau(L.Callback):
    """The held plateau's end (module docstring), and the first drop: the first step whose smoothed
    train loss is below the threshold; censored if never.

    The threshold is ``threshold`` when given (e.g. 1.3, as the paper uses for C=4), else
    ``base − frac·(base − floor)`` with base the chance loss, or the task's shortcut baseline when
    it is lower (so a shortcut alone never ends the plateau). Smoothing is an EMA with factor
    ``smoothing`` that starts at the chance loss (so early noise alone cannot end the plateau).
    Plateau spans are the maximal stretches where the smoothed loss falls by less than
    ``tolerance·(chance − floor)`` over ``window`` steps. Steps count completed optimiser updates.

    Per output cell, the plateau ends at the first eval step whose eval loss on that cell is below
    the same threshold (``per_position``), so a staircase of cells shows as distinct steps.

    The report names the task's ``shortcut_loss`` (the best loss without the sparse pattern, e.g.
    in-context colour counts on cellular automata) and whether the threshold lies above it: then a
    shortcut alone ends the plateau, and the fit warns.
    """

    def __init__(self, task: SyntheticTask, frac: float = 0.1, threshold: float | None = None, smoothing: float = 0.9,
                 window: int = 50, tolerance: float = 0.02) -> None:
        if not 0 < frac < 1:
            raise ValueError(f"plateau.frac must be in (0, 1), got {frac}")
        if not 0 <= smoothing < 1:
            raise ValueError(f"plateau.smoothing must be in [0, 1), got {smoothing}")
        self.task, self.frac, self.fixed_threshold = task, frac, threshold
        self.smoothing, self.window, self.tolerance = smoothing, window, tolerance
        self.steps: list[int] = []
        self.smoothed: list[float] = []
        self._ema = task.chance_loss
        self.cell_history: list[tuple[int, list[float]]] = []  # (eval step, eval loss per cell)
        self.curve: list[list[float]] = []  # [step, mean train loss over the last CURVE_EVERY steps]
        self._window: list[float] = []

    # The floor and the shortcut may need an oracle pass over the task: computed on first use.
    @cached_property
    def baseline(self) -> float:
        """Where the plateau sits: the chance loss, or the shortcut baseline when that is lower."""
        shortcut = self.shortcut_loss
        return self.task.chance_loss if shortcut is None else min(self.task.chance_loss, shortcut)

    @cached_property
    def gap(self) -> float:
        return self.baseline - self.task.floor_loss

    @cached_property
    def threshold(self) -> float:
        if self.fixed_threshold is not None:
            return float(self.fixed_threshold)
        return self.baseline - self.frac * self.gap

    @cached_property
    def shortcut_loss(self) -> float | None:
        value = getattr(self.task, "shortcut_loss", None)
        return None if value is None else float(value)

    @property
    def measures_shortcut(self) -> bool | None:
        """Whether the threshold lies above the shortcut baseline (None when the task has none)."""
        return None if self.shortcut_loss is None else self.threshold > self.shortcut_loss

    def setup(self, trainer: L.Trainer, pl_module: Any, stage: str) -> None:
        if self.measures_shortcut:
            warnings.warn(f"plateau threshold {self.threshold:.4g} is above the task's shortcut baseline "
                          f"{self.shortcut_loss:.4g}: a predictor without the sparse pattern already crosses "
                          "it, so this plateau measures the shortcut", stacklevel=2)

    def update(self, step: int, loss: float) -> None:
        self._ema = self.smoothing * self._ema + (1 - self.smoothing) * loss
        self.steps.append(step)
        self.smoothed.append(self._ema)
        self._window.append(loss)
        if len(self._window) == CURVE_EVERY:
            self.curve.append([step, sum(self._window) / CURVE_EVERY])
            self._window = []

    def on_train_losses(self, trainer: L.Trainer, pl_module: Any, steps: list[int], losses: list[float]) -> None:
        for step, loss in zip(steps, losses):
            self.update(step, loss)

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            e = pl_module.last_eval
            self.update_cells(e.step, e.cell_loss.tolist())

    def update_cells(self, step: int, cell_loss: list[float]) -> None:
        self.cell_history.append((step, [float(v) for v in cell_loss]))

    def per_position(self) -> list[int | None]:
        cells = len(self.cell_history[0][1]) if self.cell_history else 0
        return [next((s for s, losses in self.cell_history if losses[i] < self.threshold), None)
                for i in range(cells)]

    def end_step(self) -> int | None:
        return next((s for s, v in zip(self.steps, self.smoothed) if v < self.threshold), None)

    def spans(self) -> list[list[int]]:
        w = self.window
        spans: list[list[int]] = []
        for i in range(w, len(self.smoothed)):
            if self.smoothed[i - w] - self.smoothed[i] < self.tolerance * self.gap:
                start, end = self.steps[i - w], self.steps[i]
                if spans and start <= spans[-1][1]:
                    spans[-1][1] = end
                else:
                    spans.append([start, end])
        return spans

    def held(self) -> dict:
        """The held plateau's fields (``emergence_bench.stats.held_plateau.plateau_fields``)."""
        return plateau_fields([p[0] for p in self.curve], [p[1] for p in self.curve], self.task.chance_loss,
                              self.task.floor_loss)

    def report(self) -> dict:
        end = self.end_step()
        return {
            **self.held(),
            "threshold": self.threshold,
            "shortcut_loss": self.shortcut_loss,
            "measures_shortcut": self.measures_shortcut,
            "first_drop_step": end,
            "first_drop_censored": end is None,
            "budget": self.steps[-1] + 1 if self.steps else 0,
            "spans": self.spans(),
            "per_position": self.per_position(),
        }

    def state_dict(self) -> dict:
        return {"steps": list(self.steps), "smoothed": list(self.smoothed), "ema": self._ema,
                "cell_history": [list(h) for h in self.cell_history], "curve": [list(p) for p in self.curve],
                "window": list(self._window)}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.smoothed, self._ema = list(state["steps"]), list(state["smoothed"]), state["ema"]
        self.cell_history = [(s, list(c)) for s, c in state.get("cell_history", [])]
        self.curve = [list(p) for p in state.get("curve", [])]
        self._window = list(state.get("window", []))
