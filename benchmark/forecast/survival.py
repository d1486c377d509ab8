"""A censoring-aware forecast of the emergence step: a log-normal accelerated-failure-time model.

log T = b0 + x·b + σ·ε with ε ~ N(0, 1), fitted by maximum likelihood where an emerged run adds the
density of its log step and a censored run (never emerged by step c) adds the probability
P(log T > log c). A censored run therefore pulls the forecast later instead of being dropped (which
would bias every forecast early) or counted as emerging at the budget (which would bias it early
too). We chose it over a Cox model because it forecasts a step, not only an order: ``--forecast-stop``
needs P(T ≤ budget), which is Φ((log budget − μ)/σ) here. A small ridge penalty on the standardised
coefficients keeps fits on 40 runs stable.

Its rank metric, Harrell's concordance index, is censoring-aware too: a pair counts only when the
earlier of the two emerged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike

RIDGE = 0.1


@dataclass
class LogNormalAFT:
    """A fitted model: ``features`` names its columns; ``center``/``spread`` standardise them."""

    features: list[str]
    center: np.ndarray  # [p]
    spread: np.ndarray  # [p]
    intercept: float
    coef: np.ndarray  # [p], on standardised features
    sigma: float

    def predict(self, X: ArrayLike) -> np.ndarray:
        """X [n, p] -> the forecast log step μ [n] (the median of log T)."""
        return self.intercept + ((np.asarray(X, float) - self.center) / self.spread) @ self.coef

    def p_within(self, X: ArrayLike, budget: float) -> np.ndarray:
        """X [n, p] -> P(T ≤ budget) [n]."""
        z = (np.log(budget) - self.predict(X)) / self.sigma
        return torch.special.ndtr(torch.as_tensor(z, dtype=torch.float64)).numpy()

    def to_dict(self) -> dict:
        return {"features": self.features, "center": self.center.tolist(), "spread": self.spread.tolist(),
                "intercept": self.intercept, "coef": self.coef.tolist(), "sigma": self.sigma}

    @classmethod
    def from_dict(cls, data: dict) -> "LogNormalAFT":
        return cls(list(data["features"]), np.asarray(data["center"], float), np.asarray(data["spread"], float),
                   float(data["intercept"]), np.asarray(data["coef"], float), float(data["sigma"]))


def fit(X: np.ndarray, y: np.ndarray, censored: np.ndarray, features: list[str] | None = None,
        ridge: float = RIDGE) -> LogNormalAFT:
    """Fit on X [n, p] (p may be 0: the censoring-aware mean), log steps y [n], censored [n] bools."""
    X, y, censored = np.asarray(X, float).reshape(len(y), -1), np.asarray(y, float), np.asarray(censored, bool)
    if not np.isfinite(X).all():
        raise ValueError("forecast features hold NaN or inf (a run without a probe, or too few evals in the window)")
    if censored.all():
        raise ValueError("every run is censored: nothing emerged, so there is no emergence step to forecast")
    center, spread = X.mean(0), X.std(0)
    spread = np.where(spread > 0, spread, 1.0)
    Z = torch.as_tensor((X - center) / spread, dtype=torch.float64)
    t, c = torch.as_tensor(y, dtype=torch.float64), torch.as_tensor(censored)
    start_sigma = float(np.std(y[~censored])) if (~censored).sum() > 1 else 1.0
    params = torch.zeros(Z.shape[1] + 2, dtype=torch.float64)
    params[0], params[-1] = float(y[~censored].mean()), np.log(max(start_sigma, 0.05))
    params.requires_grad_(True)
    optimizer = torch.optim.LBFGS([params], max_iter=200, tolerance_grad=1e-10, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        nll = negative_log_likelihood(params, Z, t, c) + 0.5 * ridge * (params[1:-1] ** 2).sum()
        nll.backward()
        return nll

    optimizer.step(loss)
    found = params.detach().numpy()
    return LogNormalAFT(list(features or [f"x{i}" for i in range(Z.shape[1])]), center, spread,
                        float(found[0]), found[1:-1].copy(), float(np.exp(found[-1])))


def negative_log_likelihood(params: torch.Tensor, Z: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Mean −log L of the censored log-normal model; params = [b0, b (p), log σ]."""
    sigma = params[-1].exp()
    z = (t - params[0] - Z @ params[1:-1]) / sigma
    emerged = -0.5 * z**2 - params[-1]  # log density of log T, up to a constant
    survived = torch.special.log_ndtr(-z)  # log P(log T > the censoring time)
    return -torch.where(c, survived, emerged).mean()


def concordance(predicted: np.ndarray, y: np.ndarray, censored: np.ndarray) -> float:
    """Harrell's C: among pairs where the run that emerged first really did emerge, the fraction the
    forecast orders the same way (ties in the forecast count one half). NaN without such a pair."""
    predicted, y, censored = (np.asarray(a) for a in (predicted, y, censored))
    earlier = (y[:, None] < y[None, :]) & ~censored[:, None]  # [i, j]: i emerged before j's time
    if not earlier.any():
        return float("nan")
    agree = (predicted[:, None] < predicted[None, :]) + 0.5 * (predicted[:, None] == predicted[None, :])
    return float(agree[earlier].sum() / earlier.sum())
