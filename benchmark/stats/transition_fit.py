"""Is a learning curve's drop a phase change? A model comparison, as a reviewer would ask it.

The share (``emergence_bench.stats.transition_share``) times a curve's drop against the time to its end, so a
drop of fixed width reads more abrupt the later it comes: random timing and an abrupt jump, the
paper's two claims, become one number. This module asks the question apart from the timing. On a
curve of eval steps t [n] and losses y [n] (pass a mass or an accuracy negated), three models are
fitted by least squares, each with Gaussian residuals:

- **plateau then drop** (4 parameters): y = h − (h − l)·σ((t − m)/s), a level h held, then a
  logistic fall to l around step m with scale s;
- **power law from step 0** (4): y = c + k·(1 + t/τ)^(−α);
- **exponential from step 0** (3): y = c + k·exp(−t/τ).

Each model is fitted on a grid of its nonlinear parameters (m, s; τ, α; τ), its linear ones solved in
closed form at every grid point, so a fit is deterministic and fast enough for ``rank`` over
thousands of curves. BIC = n·ln(RSS/n) + p·ln n; the *evidence* is how much lower the plateau model's
BIC is than the better smooth model's.

The drop's **onset** is the plateau model's 10% point t₁₀ = m − s·ln 9, its end t₉₀ = m + s·ln 9, its
**width** t₉₀ − t₁₀ in steps, and in **decades** log₁₀(t⁺/t⁻), where t⁻ is the last eval at or before
t₁₀ and t⁺ the first at or after t₉₀: the width as the evals resolve it, never narrower, so a drop
between two evals is not read sharper than the evals can see. A smooth decay from step 0 spans at
least 1.3 decades from its 10% to its 90% point (an exponential: ln 0.1 / ln 0.9 ≈ 22×); a drop
after a plateau three times its width spans 0.12.

**The rule** (frozen before ladder v4's calibration; ``tests/test_transition_fit.py`` holds its
acceptance on constructed curves): a curve's drop is **abrupt** when

1. the plateau model is preferred by at least ``MIN_EVIDENCE`` (10: "very strong" on Kass and
   Raftery's scale) over both smooth models,
2. its width spans at most ``MAX_DECADES`` (0.3: the drop's 10–90% took at most as long as the time
   before it, as the evals resolve it),
3. its onset lies after at least ``MIN_PLATEAU_EVALS`` (3) evals: a plateau is seen, not inferred,
4. it fell by at least ``min_drop`` (h − l; the caller's scale, e.g. a tenth of chance − floor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

MIN_EVIDENCE = 10.0  # BIC units the plateau model must win by, against each smooth model
MAX_DECADES = 0.3  # the drop's 10%-90% width, in decades of steps as the evals resolve it
MIN_PLATEAU_EVALS = 3  # evals at or before the onset
LN9 = math.log(9.0)


@dataclass(frozen=True)
class TransitionFit:
    """One curve's model comparison: the three BICs, the evidence for the plateau model (the better
    smooth BIC minus the plateau's), the plateau model's levels (``high`` held, ``low`` reached), its
    onset t₁₀, end t₉₀, width in steps and in decades (resolved by the evals), the residual standard
    deviation of the best model, and the verdict."""

    bic_plateau: float
    bic_power: float
    bic_exponential: float
    evidence: float
    high: float
    low: float
    onset: float
    end: float
    width: float
    decades: float
    plateau_evals: int
    noise: float
    abrupt: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bic(rss: np.ndarray | float, n: int, params: int) -> float:
    return float(n * math.log(max(float(rss), 1e-300) / n) + params * math.log(n))


def _two_basis_rss(y: np.ndarray, f: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least squares of y [n] on two basis curves per grid point, f and g [M, n]: the residual sums of
    squares [M] and the coefficients of f and g [M] (a singular design falls back to the mean)."""
    a, b, c = (f * f).sum(1), (f * g).sum(1), (g * g).sum(1)
    u, v = f @ y, g @ y
    det = a * c - b * b
    ok = det > 1e-9 * np.maximum(a * c, 1e-300)
    safe = np.where(ok, det, 1.0)
    p, q = (c * u - b * v) / safe, (a * v - b * u) / safe
    rss = float(y @ y) - (p * u + q * v)
    mean_rss = float(((y - y.mean()) ** 2).sum())
    rss = np.where(ok, np.maximum(rss, 0.0), mean_rss)
    return rss, np.where(ok, p, y.mean()), np.where(ok, q, y.mean())


def _fit_plateau(t: np.ndarray, y: np.ndarray, spacing: float) -> tuple[float, float, float, float, float]:
    """RSS, h, l, m, s of the best plateau-then-logistic fit on the grid."""
    mids = np.linspace(t[0], t[-1], 3 * len(t))
    scales = np.geomspace(spacing / 8, max(t[-1], spacing), 36)
    m, s = np.meshgrid(mids, scales, indexing="ij")
    m, s = m.reshape(-1, 1), s.reshape(-1, 1)
    sig = 0.5 * (1 + np.tanh((t[None, :] - m) / (2 * s)))  # σ((t − m)/s) without overflow
    rss, high, low = _two_basis_rss(y, 1 - sig, sig)
    i = int(np.argmin(rss))
    return float(rss[i]), float(high[i]), float(low[i]), float(m[i, 0]), float(s[i, 0])


def _fit_smooth(t: np.ndarray, y: np.ndarray, spacing: float) -> tuple[float, float]:
    """RSS of the best power law and of the best exponential from step 0."""
    ones = np.ones((1, len(t)))
    taus = np.geomspace(spacing / 8, 10 * max(t[-1], spacing), 40)
    alphas = np.geomspace(0.05, 10.0, 30)
    tau, alpha = np.meshgrid(taus, alphas, indexing="ij")
    power = (1 + t[None, :] / tau.reshape(-1, 1)) ** -alpha.reshape(-1, 1)
    rss_power, _, _ = _two_basis_rss(y, np.broadcast_to(ones, power.shape), power)
    exp_taus = np.geomspace(spacing / 8, 10 * max(t[-1], spacing), 240).reshape(-1, 1)
    decay = np.exp(-t[None, :] / exp_taus)
    rss_exp, _, _ = _two_basis_rss(y, np.broadcast_to(ones, decay.shape), decay)
    return float(rss_power.min()), float(rss_exp.min())


def fit_transition(steps: Sequence[float], values: Sequence[float], min_drop: float = 0.0) -> TransitionFit | None:
    """The model comparison of the curve ``values`` [n] at eval ``steps`` [n] (increasing, ≥ 0;
    module docstring); None with fewer than 6 finite points (4 parameters need residuals to judge)."""
    points = [(float(t), float(v)) for t, v in zip(steps, values) if v is not None and math.isfinite(v)]
    if len(points) < 6:
        return None
    t = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    if np.any(np.diff(t) <= 0):
        raise ValueError("steps must be strictly increasing")
    n, spacing = len(t), float(np.median(np.diff(t)))
    rss_plateau, high, low, mid, scale = _fit_plateau(t, y, spacing)
    rss_power, rss_exp = _fit_smooth(t, y, spacing)
    bics = (_bic(rss_plateau, n, 4), _bic(rss_power, n, 4), _bic(rss_exp, n, 3))
    evidence = min(bics[1], bics[2]) - bics[0]
    onset, end = mid - scale * LN9, mid + scale * LN9
    before = t[t <= onset + 1e-9]
    after = t[t >= end - 1e-9]
    lo = float(before[-1]) if len(before) else onset
    hi = float(after[0]) if len(after) else end
    decades = math.log10(hi / lo) if lo > 0 and hi > 0 else math.inf
    noise = math.sqrt(min(rss_plateau, rss_power, rss_exp) / n)
    abrupt = (evidence >= MIN_EVIDENCE and decades <= MAX_DECADES and len(before) >= MIN_PLATEAU_EVALS
              and high - low >= max(min_drop, 1e-12))
    return TransitionFit(bic_plateau=bics[0], bic_power=bics[1], bic_exponential=bics[2], evidence=evidence,
                         high=high, low=low, onset=onset, end=end, width=end - onset, decades=decades,
                         plateau_evals=len(before), noise=noise, abrupt=abrupt)


def smooth_surrogates(steps: Sequence[float], values: Sequence[float], draws: int,
                      seed: int = 0) -> list[list[float]]:
    """The surrogate null of a real curve [n]: its best-fitting power law from step 0 plus its own
    residuals resampled with replacement, ``draws`` times [draws][n]. A rule that reads more than 5%
    of these abrupt mistakes a smooth curve with this curve's noise for a phase change."""
    t = np.array([float(s) for s in steps])
    y = np.array([float(v) for v in values])
    spacing = float(np.median(np.diff(t)))
    taus = np.geomspace(spacing / 8, 10 * max(t[-1], spacing), 40)
    alphas = np.geomspace(0.05, 10.0, 30)
    tau, alpha = np.meshgrid(taus, alphas, indexing="ij")
    power = (1 + t[None, :] / tau.reshape(-1, 1)) ** -alpha.reshape(-1, 1)
    rss, c, k = _two_basis_rss(y, np.ones_like(power), power)
    i = int(np.argmin(rss))
    fitted = c[i] + k[i] * power[i]
    residuals = y - fitted
    rng = np.random.default_rng(seed)
    return [(fitted + rng.choice(residuals, size=len(t), replace=True)).tolist() for _ in range(draws)]
