"""How good a forecast is: leave-one-out inside a fleet, fit-on-one-apply-to-another across fleets,
and a permutation test of the whole pipeline.

The pipeline fitted on a training set is: choose the ``k`` features whose own forecast ranks the
training runs best (|Harrell's C − ½| of the feature alone), then fit the censored log-normal model
on them. Leave-one-out reruns all of it without the held-out run, so the selection never sees the
run it forecasts; the permutation test shuffles the outcomes (step and censoring together) and
reruns all of it again, so its null includes the selection's optimism.

Scores of forecasts against outcomes:
- ``c_index``: Harrell's C over every run (censoring-aware; ½ is chance);
- ``spearman``, ``pearson``: rank and linear correlation of forecast and log step over the runs that
  emerged (the reproduction's r is the linear one on log steps), by torchmetrics;
- ``mae`` and ``mae_baseline``: mean absolute error in log steps over the runs that emerged, of the
  forecast and of the censoring-aware mean of the training runs (the model with no feature).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torchmetrics.functional import pearson_corrcoef, spearman_corrcoef

from emergence_bench.forecast import PERMUTATIONS
from emergence_bench.forecast.stop import decide
from emergence_bench.forecast.survival import LogNormalAFT, concordance, fit
from emergence_bench.results.row import Row, emergence_step, forecast_stopped


@dataclass
class Fleet:
    """Runs of one setting at one window: features X [n, p] named ``names``, log steps y, censored."""

    name: str
    window: int
    X: np.ndarray
    y: np.ndarray
    censored: np.ndarray
    names: tuple[str, ...]


def select(X: np.ndarray, y: np.ndarray, censored: np.ndarray, k: int) -> list[int]:
    """The columns of the ``k`` features that alone order the runs best (ties: the earlier column)."""
    strength = [abs(concordance(X[:, j], y, censored) - 0.5) if np.isfinite(X[:, j]).all() else -1.0
                for j in range(X.shape[1])]
    return sorted(np.argsort(-np.asarray(strength), kind="stable")[:k].tolist())


def pipeline(X: np.ndarray, y: np.ndarray, censored: np.ndarray, names: tuple[str, ...],
             k: int) -> tuple[LogNormalAFT, list[int]]:
    """Selection then fit, on one training set: the model and the columns of X it reads."""
    columns = select(X, y, censored, k)
    return fit(X[:, columns], y, censored, [names[j] for j in columns]), columns


def leave_one_out(X: np.ndarray, y: np.ndarray, censored: np.ndarray, names: tuple[str, ...],
                  k: int) -> tuple[np.ndarray, np.ndarray]:
    """(forecast [n], baseline [n]) of each run by the pipeline fitted without it."""
    n = len(y)
    forecast, baseline = np.empty(n), np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        model, columns = pipeline(X[keep], y[keep], censored[keep], names, k)
        forecast[i] = model.predict(X[i:i + 1, columns])[0]
        baseline[i] = fit(np.empty((keep.sum(), 0)), y[keep], censored[keep]).intercept
    return forecast, baseline


def scores(forecast: np.ndarray, y: np.ndarray, censored: np.ndarray, baseline: np.ndarray) -> dict:
    """The forecast's scores against the outcomes (module docstring)."""
    emerged = ~censored
    f, t = torch.as_tensor(forecast[emerged]), torch.as_tensor(y[emerged])
    correlated = emerged.sum() >= 3 and f.std() > 0 and t.std() > 0
    return {"n": int(len(y)), "emerged": int(emerged.sum()),
            "c_index": concordance(forecast, y, censored),
            "spearman": float(spearman_corrcoef(f, t)) if correlated else float("nan"),
            "pearson": float(pearson_corrcoef(f, t)) if correlated else float("nan"),
            "mae": float(np.abs(forecast - y)[emerged].mean()) if emerged.any() else float("nan"),
            "mae_baseline": float(np.abs(baseline - y)[emerged].mean()) if emerged.any() else float("nan")}


def permutation_p(observed: dict, rerun: Callable[[np.ndarray, np.ndarray], dict], y: np.ndarray,
                  censored: np.ndarray, permutations: int, seed: int) -> dict:
    """One-sided p of ``c_index`` and ``spearman``: (1 + #null ≥ observed) / (1 + permutations), the
    null from ``rerun(y', censored')`` (the whole pipeline) on outcomes shuffled by run; NaN for a
    score that is not defined on the real outcomes."""
    generator = np.random.default_rng(seed)
    higher = {"c_index": 0, "spearman": 0}
    for _ in range(permutations):
        order = generator.permutation(len(y))
        null = rerun(y[order], censored[order])
        for key in higher:
            higher[key] += bool(null[key] >= observed[key]) if np.isfinite(null[key]) else 0
    return {f"p_{key}": (1 + count) / (1 + permutations) if np.isfinite(observed[key]) else float("nan")
            for key, count in higher.items()}


def in_domain(fleet: Fleet, k: int = 2, permutations: int = PERMUTATIONS, seed: int = 0) -> dict:
    """Leave-one-out scores within ``fleet``, with their permutation p."""
    def rerun(y: np.ndarray, censored: np.ndarray) -> dict:
        forecast, baseline = leave_one_out(fleet.X, y, censored, fleet.names, k)
        return scores(forecast, y, censored, baseline)

    observed = rerun(fleet.y, fleet.censored)
    final, _ = pipeline(fleet.X, fleet.y, fleet.censored, fleet.names, k)
    return {"fit": fleet.name, "apply": fleet.name, "window": fleet.window, "features": final.features,
            **observed, **permutation_p(observed, rerun, fleet.y, fleet.censored, permutations, seed)}


def transfer(train: Fleet, test: Fleet, k: int = 2, permutations: int = PERMUTATIONS, seed: int = 0) -> dict:
    """The pipeline fitted on ``train`` forecasting ``test``; p from shuffling the test outcomes."""
    model, columns = pipeline(train.X, train.y, train.censored, train.names, k)
    forecast = model.predict(test.X[:, columns])
    baseline = np.full(len(test.y), fit(np.empty((len(train.y), 0)), train.y, train.censored).intercept)

    def rerun(y: np.ndarray, censored: np.ndarray) -> dict:
        return scores(forecast, y, censored, baseline)

    observed = rerun(test.y, test.censored)
    return {"fit": train.name, "apply": test.name, "window": test.window, "features": model.features,
            **observed, **permutation_p(observed, rerun, test.y, test.censored, permutations, seed)}


def stop_savings(outcomes_known: Sequence[Row], stopped: Sequence[Row]) -> dict:
    """What ``sweep --forecast-stop`` saved, from the same runs without it (``outcomes_known``, their
    true outcomes) and with it (``stopped``), matched by config without the forecast_stop callback.

    ``saved``: the fraction of the training steps of the matched runs that the stop saved;
    ``wrongly_stopped``: runs stopped that emerged within the budget without the stop, as a count and
    as a fraction of all matched runs and of those that emerged."""
    def key(row: Row) -> str:
        config = {k: v for k, v in row["config"].items() if k not in ("callbacks", "trainer")}
        return repr(sorted((k, repr(v)) for k, v in config.items())) + repr(row["config"]["trainer"].get("max_steps"))

    known = {key(r): r for r in outcomes_known}
    pairs = [(known[key(r)], r) for r in stopped if key(r) in known]
    if not pairs:
        raise ValueError("no run of the forecast-stopped sweep matches a run with a known outcome "
                         "(same config and seed)")
    steps = sum(full["timing"]["steps"] for full, _ in pairs)
    used = sum(r["timing"]["steps"] for _, r in pairs)
    halted = [(full, r) for full, r in pairs if forecast_stopped(r)]
    emerged = [full for full, _ in pairs if emergence_step(full) is not None]
    wrong = [full for full, _ in halted if emergence_step(full) is not None]
    return {"runs": len(pairs), "stopped": len(halted), "would_emerge": len(emerged), "wrongly_stopped": len(wrong),
            "wrongly_stopped_of_runs": len(wrong) / len(pairs),
            "wrongly_stopped_of_emerged": len(wrong) / len(emerged) if emerged else 0.0,
            "steps_without": steps, "steps_with": used, "saved": 1 - used / steps}


def replay_stop(saved: dict, rows: Sequence[Row], risk: float) -> list[dict]:
    """What ``sweep --forecast-stop`` with the saved forecast would have done to finished ``rows``:
    each row as it would have ended (stopped at the first eval at or after the window when the
    forecast gives it less than ``risk`` of emerging within its budget). The decision reads the
    row's records up to that eval only, as the callback does during the run."""
    model, window = LogNormalAFT.from_dict(saved["model"]), int(saved["window"])
    ended = []
    for row in rows:
        evals = [e[0] for e in row["curves"]["eval"] if e[0] >= window]
        emerged = emergence_step(row)
        if not evals or (emerged is not None and emerged <= evals[0]):  # it emerged by the decision
            ended.append({**row, "forecast_stop": {"stopped": False, "step": None}})
            continue
        decision = decide(model, row, int(evals[0]), row["config"]["trainer"]["max_steps"], risk)
        stop = decision["stopped"]
        ended.append({**row, "timing": {**row["timing"], "steps": decision["step"] if stop else row["timing"]["steps"]},
                      "emergence": {"step": None, "censored": True} if stop else row["emergence"],
                      "forecast_stop": decision})
    return ended
