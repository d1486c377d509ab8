"""The replication sized before it runs: for each row it will judge, the power of the row's own test at
a size, under the first stage's estimates, and the smallest size that reaches the target.

The assumed effects are the first stage's estimates as docs/results.md reports them (``FIRST_STAGE``,
each with where it comes from). Claims 1 and 8 have no closed form (a bootstrap of a quartile
ratio; the log-rank test on censored, tied steps): their data are drawn from
``stats.emergence_model`` fitted to those estimates, and the test the claim runs is run on each draw
(``stats.power.simulated_power``, seeded). Claims 2 and 3 are exact binomial and sign tests
(``stats.power``, exact).

Each row is sized at ``ALPHA`` = 0.05 / 5, the level Holm's first step holds each of the
replication's five rows to, so its power under Holm is at least the table's. Sizes are runs a cell
(both task instances together) on a grid of 8 (4 seeds an instance) up to ``MAX_RUNS``.

``python -m emergence_bench.claims.replication_power`` prints docs/claims.md's table (a few minutes:
claim 1's bootstrap runs once per simulated data set).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from emergence_bench.stats.emergence_model import EmergenceModel, log_sd_for_spread
from emergence_bench.stats.power import binomial_power, measured_sign_power, simulated_power, smallest_size
from emergence_bench.stats.quartile_ratio import relative_to_median, spread_test
from emergence_bench.stats.significance import logrank

ROWS = 5  # the replication's Holm family: seeds-differ, abrupt by the rule, few-heads, curricula × 2
ALPHA = 0.05 / ROWS
TARGET = 0.8
SIZES = tuple(range(16, 129, 8))  # runs a cell: 8 to 64 seeds on each of the 2 task instances
MAX_RUNS = SIZES[-1]  # beyond this a cell costs more than the replication is worth on 2 cores
INSTANCES = 2
BUDGET, EVERY = 1500, 20  # claims-cpu-v2's steps (the curricula's stage counted in) and eval cadence



@dataclass(frozen=True)
class FirstStage:
    """What the first stage (claims-cpu-v2, seeds 0-7 of task instances 0 and 1, 16 runs a cell)
    measured, as docs/results.md reports it. Steps are training steps counted from the first (a
    curriculum's stage included); ``emergence``: an arm's share emerged within 1,500 steps and its
    Kaplan–Meier median step."""

    spread: float = 1.52  # claim 1: q75/q25 of the relative emergence steps, 1.52 [1.15, inf]
    never: float = 2 / 16  # claim 1: 14 of 16 emerged
    instance_medians: tuple[float, float] = (780.0, 600.0)  # claim 1: each instance's median step
    min_spread: float = 1.25  # claim 1's null: the spread eval spacing alone could give
    resamples: int = 4000  # claim 1's bootstrap
    abrupt: float = 15 / 16  # claim 2: abrupt by the share (the rule read every cell abrupt on seeds 104-107)
    patched: float = 13 / 16  # claim 3: runs that emerged between two checkpoints and were patched
    above_half: float = 2 / 13  # claim 3: patched runs whose top 4 heads recovered more than half the gap
    emergence: tuple[tuple[str, float, float], ...] = (  # claim 8: (arm, share emerged, KM median)
        ("none", 14 / 16, 760.0), ("after dyck", 12 / 16, 1200.0), ("after neural_ca", 13 / 16, 1160.0))

    def arm(self, name: str) -> tuple[float, float]:
        """(share emerged, KM median step) of a claim-8 arm."""
        return next((emerged, median) for arm, emerged, median in self.emergence if arm == name)


FIRST_STAGE = FirstStage()
CURRICULA = ("after dyck", "after neural_ca")


def _scales() -> tuple[float, ...]:
    """Each instance's median over their geometric mean (the two instances differ by 780 / 600)."""
    medians = FIRST_STAGE.instance_medians
    centre = math.exp(sum(math.log(m) for m in medians) / len(medians))
    return tuple(m / centre for m in medians)


def _toward(null: float, estimate: float, scale: float) -> float:
    """The effect ``scale`` of the way from the null to the estimate (1: the estimate; 0: the null)."""
    return null + scale * (estimate - null)


def no_curriculum(log_sd: float) -> EmergenceModel:
    """The emergence group's steps: the first stage's share and median, at this log-sd."""
    emerged, median = FIRST_STAGE.arm("none")
    return EmergenceModel.fitted(emerged, median, log_sd, BUDGET, EVERY, _scales())


def within_instance_log_sd(spread: float) -> float:
    """The log-sd at which one instance's steps have this q75 / q25, with the first stage's share never."""
    return log_sd_for_spread(spread, FIRST_STAGE.never)


def spread_power(runs: int, scale: float = 1.0, sims: int = 1000, seed: int = 0) -> float:
    """Claim 1: P(p < ALPHA) of its bootstrap test (``stats.quartile_ratio.spread_test``, as the claim
    runs it: resampled from default_rng(0)) on ``runs`` runs a cell, at a spread ``scale`` of the way
    from 1.25 to the first stage's 1.52 on the log scale."""
    floor = FIRST_STAGE.min_spread
    spread = math.exp(_toward(math.log(floor), math.log(FIRST_STAGE.spread), scale))
    model = no_curriculum(within_instance_log_sd(spread))

    def p_value(rng: np.random.Generator) -> float:
        times, censored = model.draw(rng, runs // INSTANCES)
        relative: list[float] = []
        for t, c in zip(times, censored):
            relative += relative_to_median(np.where(c, np.inf, t).tolist(), float(t.max()))
        return spread_test(relative, floor, FIRST_STAGE.resamples)[3]

    return simulated_power(p_value, ALPHA, sims, seed).power


def curriculum_power(arm: str, runs: int, scale: float = 1.0, sims: int = 4000, seed: int = 0) -> float:
    """Claim 8, one curriculum: P(p < ALPHA) of the log-rank test of its emergence steps against no
    curriculum's, ``runs`` runs an arm, its share emerged and (log) median ``scale`` of the way from no
    curriculum's to the first stage's estimate for the arm."""
    log_sd = within_instance_log_sd(FIRST_STAGE.spread)
    none = no_curriculum(log_sd)
    (e0, m0), (e1, m1) = FIRST_STAGE.arm("none"), FIRST_STAGE.arm(arm)
    after = EmergenceModel.fitted(_toward(e0, e1, scale), math.exp(_toward(math.log(m0), math.log(m1), scale)),
                                  log_sd, BUDGET, EVERY, _scales())

    def p_value(rng: np.random.Generator) -> float:
        ta, ca = after.draw(rng, runs // INSTANCES)
        tb, cb = none.draw(rng, runs // INSTANCES)
        return logrank(ta.ravel(), ca.ravel(), tb.ravel(), cb.ravel()).p

    return simulated_power(p_value, ALPHA, sims, seed).power


def abrupt_power(runs: int, scale: float = 1.0) -> float:
    """Claim 2 by the rule: the exact binomial test's power against 1/2, every run measured."""
    return binomial_power(runs, _toward(0.5, FIRST_STAGE.abrupt, scale), 0.5, ALPHA)


def patching_power(runs: int, scale: float = 1.0) -> float:
    """Claim 3: the sign test's power when a run is patched with the first stage's probability and
    recovers more than half with a probability ``scale`` of the way from 1/2 to its 2 of 13."""
    return measured_sign_power(runs, FIRST_STAGE.patched, _toward(0.5, FIRST_STAGE.above_half, scale), ALPHA)


@dataclass(frozen=True)
class Planned:
    """One row of the replication: its claim, statistic, the first stage's estimate and the effect
    assumed, the runs a cell declared, its power there, and at half the effect there and at
    ``MAX_RUNS``. ``searched``: the size came from the search (False: the row shares a group sized for
    another row)."""

    row: str
    statistic: str
    first_stage: str
    assumed: str
    runs: int
    power: float
    half_power: float
    half_power_at_max: float
    searched: bool


def size(power_at: Callable[[int], float]) -> tuple[int, float]:
    """The smallest size on ``SIZES`` reaching ``TARGET``, and its power; where none does,
    ``MAX_RUNS`` (the feasible size declared instead) and its power."""
    found, power = smallest_size(power_at, TARGET, SIZES)
    return (found, power) if found is not None else (MAX_RUNS, power)


def plan(spread_sims: int = 1000, logrank_sims: int = 4000) -> list[Planned]:
    """Every row of the replication, sized (``spread_sims`` and ``logrank_sims``: the simulations per
    size of claims 1 and 8)."""
    def spread_at(runs: int, scale: float = 1.0) -> float:
        return spread_power(runs, scale, sims=spread_sims)

    def curriculum_at(arm: str) -> Callable[..., float]:  # (runs, scale=1.0) -> power
        return partial(curriculum_power, arm, sims=logrank_sims)

    spread_runs, spread_reached = size(spread_at)
    patching_runs, patching_reached = size(patching_power)
    curricula = {arm: size(curriculum_at(arm))[0] for arm in CURRICULA}
    curricula_runs = max(curricula.values())
    log_sd = within_instance_log_sd(FIRST_STAGE.spread)
    rows = [
        Planned("1. seeds-differ", "bootstrap test of q75/q25 of the relative emergence step against 1.25",
                "1.52 [1.15, ∞], n 16", f"q75/q25 = 1.52 (log-sd {log_sd:.2f} within an instance, 2 of 16 never)",
                spread_runs, spread_reached, spread_at(spread_runs, 0.5), spread_at(MAX_RUNS, 0.5), True),
        Planned("2. abrupt-by-rule", "exact binomial test of the share of runs abrupt by the rule against 1/2",
                "15/16 abrupt by the share", "a share of 15/16", spread_runs, abrupt_power(spread_runs),
                abrupt_power(spread_runs, 0.5), abrupt_power(MAX_RUNS, 0.5), False),
        Planned("3. few-heads", "sign test of the fraction the top 4 heads recover against 1/2",
                "0.32 [0.29, 0.41]; 2 of 13 above 1/2, 13 of 16 patched",
                "P(above 1/2) = 2/13, 13 of 16 runs patched", patching_runs, patching_reached,
                patching_power(patching_runs, 0.5), patching_power(MAX_RUNS, 0.5), True),
    ]
    none_emerged, none_median = FIRST_STAGE.arm("none")
    for arm, runs in curricula.items():
        emerged, median = FIRST_STAGE.arm(arm)
        power_at = curriculum_at(arm)
        measured = (f"KM median {median:.0f} against {none_median:.0f} steps, {emerged * 16:.0f}/16 against "
                    f"{none_emerged * 16:.0f}/16 emerged")
        rows.append(Planned(f"8. curricula[{arm}]", "log-rank test of the emergence step, against no curriculum",
                            measured, f"as the first stage: {emerged * 16:.0f}/16 emerged, median {median:.0f}",
                            curricula_runs, power_at(curricula_runs, 1.0), power_at(curricula_runs, 0.5),
                            power_at(MAX_RUNS, 0.5), runs == curricula_runs))
    return rows


def table(rows: list[Planned]) -> str:
    """The rows as docs/claims.md's Markdown table."""
    lines = [f"| row | statistic | first stage | assumed effect | alpha | runs a cell | power | half the effect: "
             f"power there, at {MAX_RUNS} |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = f"{r.runs}" + ("" if r.searched else " (sized for another row)")
        lines.append(f"| {r.row} | {r.statistic} | {r.first_stage} | {r.assumed} | {ALPHA:g} | {runs} | "
                     f"{r.power:.2f} | {r.half_power:.2f}, {r.half_power_at_max:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(plan()), end="")
