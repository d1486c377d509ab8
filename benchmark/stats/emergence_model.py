"""When runs emerge, as a model to plan with: fitted to what a finished stage reported (its share of
runs that emerged and its Kaplan–Meier median), then drawn from to simulate a test's power.

A run never emerges with probability ``never`` (a seed that stays on its plateau); otherwise its
emergence step is log-normal, with median ``median`` times its task instance's ``scales`` factor and
log-sd ``log_sd``, read at the first eval at or after it (evals every ``every`` steps), and censored at
``budget`` (the run's last step). All steps are training steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats


def log_sd_for_spread(spread: float, never: float) -> float:
    """The log-sd at which the q75 / q25 of one instance's steps (a never-emerged run ranked last)
    is ``spread``: the log-normal's quantiles at 0.25 / (1 − never) and 0.75 / (1 − never)."""
    if not spread > 1 or not 0 <= never < 0.25:
        raise ValueError(f"need a spread > 1 and 0 ≤ never < 0.25 (q75 among the runs that emerge), "
                         f"got {spread} and {never}")
    z = stats.norm.ppf([0.25 / (1 - never), 0.75 / (1 - never)])
    return math.log(spread) / float(z[1] - z[0])


@dataclass(frozen=True)
class EmergenceModel:
    """See the module docstring."""

    never: float
    median: float
    log_sd: float
    budget: int
    every: int
    scales: tuple[float, ...] = (1.0,)

    def share_by(self, step: float) -> float:
        """The share of runs emerged by ``step`` (no eval rounding), over the instances equally."""
        z = (math.log(step) - np.log(self.median * np.array(self.scales))) / self.log_sd
        return float((1 - self.never) * stats.norm.cdf(z).mean())

    def draw(self, rng: np.random.Generator, per_instance: int) -> tuple[np.ndarray, np.ndarray]:
        """(times, censored), each [instances, per_instance]: a run's emergence step on the eval grid,
        or the budget (censored) where it never emerged within it."""
        shape = (len(self.scales), per_instance)
        steps = self.median * np.array(self.scales)[:, None] * np.exp(self.log_sd * rng.standard_normal(shape))
        steps = np.ceil(steps / self.every) * self.every
        censored = (rng.random(shape) < self.never) | (steps > self.budget)
        return np.where(censored, float(self.budget), steps), censored

    @classmethod
    def fitted(cls, emerged: float, km_median: float, log_sd: float, budget: int, every: int,
               scales: tuple[float, ...] = (1.0,)) -> EmergenceModel:
        """The model whose share emerged by the budget is ``emerged`` and whose median (the step half
        the runs had emerged by) is ``km_median``: at this ``log_sd``, solved for ``never`` and
        ``median``; where that would need never < 0 (more emerged by the budget than this log-sd lets
        reach it), never = 0 and the log-sd narrowed until both hold."""
        if not 0.5 < emerged < 1 or not 0 < km_median < budget:
            raise ValueError(f"need more than half but not all runs emerged (got {emerged}) and a median inside "
                             f"the budget (got {km_median} of {budget})")

        def reached(step: float, log_median: float, sd: float) -> float:
            return float(stats.norm.cdf((math.log(step) - log_median - np.log(scales)) / sd).mean())

        def ratio_gap(log_median: float) -> float:
            # (1 − never)·reached(km_median) = 1/2 and (1 − never)·reached(budget) = emerged: their ratio
            # rises with the median, from 1 (every run early) without bound, so one median solves it.
            return reached(budget, log_median, log_sd) / reached(km_median, log_median, log_sd) - 2 * emerged

        high = math.log(budget)
        while ratio_gap(high) < 0:
            high += log_sd
        log_median = optimize.brentq(ratio_gap, math.log(km_median) - 20 * log_sd, high, xtol=1e-12)
        never = 1 - 0.5 / reached(km_median, log_median, log_sd)
        if never >= 0:
            return cls(never, math.exp(log_median), log_sd, budget, every, scales)

        def median_for(sd: float) -> float:  # the log median at which half emerge by km_median, never = 0
            return optimize.brentq(lambda m: reached(km_median, m, sd) - 0.5, math.log(km_median) - 20 * sd,
                                   math.log(km_median) + 20 * sd, xtol=1e-12)

        # Narrower log-sds let more emerge by the budget, up to all: one of them fits.
        sd = optimize.brentq(lambda sd: reached(budget, median_for(sd), sd) - emerged, log_sd / 100, log_sd,
                             xtol=1e-12)
        return cls(0.0, math.exp(median_for(sd)), sd, budget, every, scales)
