"""Plateau: the loss held at one level until its last sharp drop (the paper's plateau), and the first
drop from chance.

The plateau's end (``end_step``) is the held plateau's (``emergence_bench.stats.held_plateau``), read on
the train loss averaged over every ``CURVE_EVERY`` steps, the curve the recorder keeps. The first
drop (``first_drop_step``) is the first step the smoothed loss falls below a threshold just under
chance: on most tasks the fall to a shortcut's level, tens of steps in, long before the pattern is
found. Rows of schema 2 named the first drop ``end_step``; they are upgraded when read
(``emergence_bench.results.store``)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypedDict

import lightning as L

from emergence_bench.registry import register_callback
from emergence_bench.results.columns import Computed, Median, missing
from emergence_bench.results.measurement import Measurement, every_run, register_measurement
from emergence_bench.results.row import Row, plateau_section
from emergence_bench.results.row_curves import worth
from emergence_bench.stats.held_plateau import plateau_fields

if TYPE_CHECKING:
    from emergence_bench.tasks.base import SyntheticTask

CURVE_EVERY = 10  # steps per point of the curve the held plateau is read on (the recorder's)


class PlateauSection(TypedDict, total=False):
    # The held plateau (emergence_bench.stats.held_plateau): absent in an upgraded row without a curve.
    end_step: int | None  # where the last sharp drop starts; None: still held at the budget (censored)
    censored: bool
    start_step: int | None  # where the hold began (None: no hold, the loss fell at once)
    level: float | None  # the loss held
    drop: float | None  # from the level to the curve's end
    drop_width: int | None  # steps from the end to 80% of that drop
    worth: bool  # a plateau worth the name (held most of the time to its end, twice its drop's width)
    # The first drop from chance.
    threshold: float
    shortcut_loss: float | None
    measures_shortcut: bool  # the threshold lies above the shortcut baseline
    first_drop_step: int | None  # None: never crossed within the budget (censored)
    first_drop_censored: bool
    budget: int
    spans: list[list[int]]  # [start, end] stretches where the smoothed loss was flat
    per_position: list[int | None]  # per output cell: the first eval step below the threshold


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


def _worth_cell(row: dict[str, Any]) -> str:
    if missing(row["held_measured_runs"]) or not row["held_measured_runs"]:
        return "-"
    return f"{row['held_worth']}/{row['held_measured_runs']}"


def _held_counts(runs: Sequence[Row]) -> dict[str, Any]:
    """The runs with a plateau worth the name, by the loss or by the cells (``row_curves.worth``), of
    those that measured one."""
    measured = [r for r in runs if "worth" in plateau_section(r)]
    return {"held_worth": sum(1 for r in measured if worth(r)), "held_measured_runs": len(measured)}


# The held plateau's end (only rows that measured it: an upgraded row without a curve did not), with the
# runs whose plateau is worth the name; then the first drop, "(shortcut)" where its threshold lies above
# the task's shortcut baseline (the recorder's plateau_measures_shortcut).
PLATEAU = register_measurement(Measurement(
    "plateau", section="plateau", fields=PlateauSection, applies=lambda row: "worth" in plateau_section(row),
    columns=(Median("median_plateau_end", "end_step", interval=("plateau_low", "plateau_high"),
                    measured="plateau_measured", header="median plateau end (95% CI)",
                    ratios="plateau", against_none=True),
             Computed(("held_worth", "held_measured_runs"), _held_counts, better=None,
                      header="plateaus worth the name", cell=_worth_cell)),
    figures=("curves", "axes", "thresholds")))

FIRST_DROP = register_measurement(Measurement(
    "first_drop", section="plateau", fields=PlateauSection, applies=every_run,
    columns=(Median("median_first_drop", "first_drop_step", interval=("first_drop_low", "first_drop_high"),
                    measured="first_drop_measured", header="median first drop (95% CI)",
                    note=("plateau_measures_shortcut", " (shortcut)"), ratios="first_drop"),)))
