"""Threshold sensitivity: how the emergence step and the first loss drop move with their thresholds.

Both measures are "the first step past a threshold", so a conclusion drawn from them (this mixer's
plateau is twice that one's) should survive other reasonable thresholds. From each run's recorded
curves, for every leaderboard row (runs equal but for the seed):

- emergence: the first eval whose accuracy reaches τ × the task's reachable accuracy, for τ from 0.5
  to 0.99; Kaplan–Meier median over seeds, a run censored at the last step it trained (a run that
  stopped at its emergence is censored there for higher τ);
- first loss drop: the first point of the recorded train-loss curve (means over ``log_every`` steps)
  below base − f·(base − floor), base the chance loss or the shortcut baseline when lower (as the
  plateau callback), for f from 0.05 to 0.5. The callback smooths with an EMA instead, so at its own
  f the curve here can differ from the leaderboard's first drop by a few steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from emergence_bench.results.row import Row, section, step_budget
from emergence_bench.stats.medians import kaplan_meier_median

ACCURACY_FRACTIONS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
LOSS_FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.5)


def emergence_step_at(row: Row, tau: float) -> int | None:
    """The first eval step whose accuracy is ≥ τ × the reachable accuracy (None: never)."""
    reachable = section(row, "task_facts").get("max_accuracy") or 1.0
    return next((int(step) for step, _, accuracy in section(row, "curves").get("eval", [])
                 if accuracy is not None and accuracy >= tau * reachable), None)


def plateau_end(row: Row, fraction: float) -> int | None:
    """The first recorded train-loss point below base − fraction·(base − floor) (None: never)."""
    facts = section(row, "task_facts")
    if facts.get("chance_loss") is None:
        return None
    shortcut = facts.get("shortcut_loss")
    base = facts["chance_loss"] if shortcut is None else min(facts["chance_loss"], shortcut)
    threshold = base - fraction * (base - (facts.get("floor_loss") or 0.0))
    return next((int(step) for step, loss in section(row, "curves").get("train_loss", [])
                 if loss is not None and loss < threshold), None)


def _median(rows: Sequence[Row], first: Callable[..., int | None]) -> float:
    times = [first(r) for r in rows]
    median = kaplan_meier_median([t if t is not None else step_budget(r) for t, r in zip(times, rows)],
                                 [t is None for t in times])
    return float("nan") if median is None else float(median)


def sensitivity(groups: Sequence[tuple[str, Sequence[Row]]]) -> dict[str, dict[str, list[float]]]:
    """label -> {"emergence": KM medians per τ of ACCURACY_FRACTIONS, "plateau": per f of
    LOSS_FRACTIONS} (NaN where the median is not reached)."""
    return {label: {"emergence": [_median(rows, lambda r, t=t: emergence_step_at(r, t)) for t in ACCURACY_FRACTIONS],
                    "plateau": [_median(rows, lambda r, f=f: plateau_end(r, f)) for f in LOSS_FRACTIONS]}
            for label, rows in groups}


def used_thresholds(rows: Sequence[Row]) -> tuple[float | None, float | None]:
    """(τ, f) the runs' own callbacks used: the emergence threshold when relative, the plateau frac
    when no fixed threshold was set."""
    callbacks = rows[0]["config"].get("callbacks") or {}
    emergence, plateau = callbacks.get("emergence") or {}, callbacks.get("plateau") or {}
    tau = emergence.get("threshold", 0.95) if emergence.get("relative", True) else None
    return tau, (plateau.get("frac", 0.1) if plateau.get("threshold") is None else None)
