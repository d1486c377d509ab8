"""Claim 2: emergence is abrupt, and coincides with attention heads jumping to the sparse pattern.

Two tests on the ``emergence`` group, and a third that the replication declares:

- ``abrupt``: a run is abrupt when the median share of its pattern cells' transitions is at most
  ``ABRUPT_SHARE`` (``emergence_bench.stats.transition_share``: the shortest window holding 80% of a cell's loss
  drop, over the time to its end). The claim: most runs are abrupt (exact binomial test against 1/2).
- by the abruptness rule (``evaluate_abrupt_by_rule``, docs/ranking.md "The abruptness rule"): a run
  is abrupt when at least half its pattern cells with a drop are abrupt by the rule's model comparison
  (``emergence_bench.stats.transition_fit``), which reads the drop's shape apart from its timing. The
  same binomial test. Declared for the replication only (``claims.replication``), so the first
  stage's rows stay as they were judged.
- ``with-attention``: per run, the midpoint of the best head's jump in mass on the true sources
  (the attention probe's history) against the midpoint of the eval loss's drop, as a lag relative to
  the loss's midpoint. The claim: the lag lies within ±``margin`` (two one-sided sign tests). Needs
  attention scores; ``n/a`` for a mixer without them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from emergence_bench.claims import compare
from emergence_bench.claims.claim import Claim, Evidence, NotApplicable, Outcome, Rows, has_attention, register_claim
from emergence_bench.claims.design import frozen
from emergence_bench.measurements.attention_probe import ATTENTION_PROBE
from emergence_bench.results.row import Row, section
from emergence_bench.results.row_curves import MIN_DROP, cell_fits, cell_transitions, loss_transition, min_drop
from emergence_bench.stats.significance import sign_test
from emergence_bench.stats.transition_fit import MAX_DECADES, MIN_EVIDENCE, MIN_PLATEAU_EVALS
from emergence_bench.stats.transition_share import ABRUPT_SHARE, transition


def shortcut_cells(row: Row, cells: int) -> list[bool]:
    """Per output cell, whether earlier outputs predict it (``task_facts.shortcut_cells``): such a cell
    needs no pattern, so its drop says nothing of the pattern's emergence."""
    return section(row, "task_facts").get("shortcut_cells") or [False] * cells


def run_share(row: Row) -> float | None:
    """The median share of the transitions of the run's cells that only the sparse pattern predicts
    (a shortcut cell is left out); None where no such cell had one."""
    transitions = cell_transitions(row)
    shares = [t.share for t, s in zip(transitions, shortcut_cells(row, len(transitions))) if t is not None and not s]
    return statistics.median(shares) if shares else None


def run_abrupt_by_rule(row: Row) -> bool | None:
    """Whether at least half the run's pattern cells whose loss dropped (the plateau model fell by a
    tenth of chance − floor) are abrupt by the abruptness rule: the share's median read as a count;
    None where no pattern cell dropped."""
    fits = cell_fits(row)
    dropped = [f for f, s in zip(fits, shortcut_cells(row, len(fits)))
               if f is not None and not s and f.high - f.low >= min_drop(row)]
    return 2 * sum(f.abrupt for f in dropped) >= len(dropped) if dropped else None


def evaluate_abrupt(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    shares = [s for s in map(run_share, rows["emergence"]) if s is not None]
    if not shares:
        return {"": NotApplicable("no run's loss dropped: nothing to time")}
    evidence = compare.rate([s <= settings["abrupt_share"] for s in shares], 0.5, "abrupt runs")
    return {"": replace(evidence, details=evidence.details + "; median share per run "
                        + ", ".join(f"{s:.2f}" for s in sorted(shares)),
                        data={"median share of a run's cell transitions": shares},
                        guides={f"abrupt at ≤ {settings['abrupt_share']}": settings["abrupt_share"]})}


def evaluate_abrupt_by_rule(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    verdicts = [v for v in map(run_abrupt_by_rule, rows["emergence"]) if v is not None]
    if not verdicts:
        return {"": NotApplicable("no run's pattern cells dropped: nothing to judge")}
    return {"": compare.rate(verdicts, 0.5, "runs abrupt by the rule")}


# The rule's constants, frozen into the settings of a claim that judges by it (a change to the rule
# changes the declared design, and so its hash).
RULE = {"min_evidence": MIN_EVIDENCE, "max_decades": MAX_DECADES, "min_plateau_evals": MIN_PLATEAU_EVALS,
        "min_drop": MIN_DROP, "cells": "at least half the pattern cells with a drop"}


def attention_lag(row: Row) -> float | None:
    """(mass midpoint − loss midpoint) / loss midpoint, for a run whose loss and best-head mass both
    moved; None otherwise."""
    history = ATTENTION_PROBE.read(row).get("history") or []
    mass = transition([h[0] for h in history], [None if h[1] is None else -h[1] for h in history], min_drop=0.1)
    loss = loss_transition(row)
    if mass is None or loss is None or loss.midpoint <= 0:
        return None
    return (mass.midpoint - loss.midpoint) / loss.midpoint


def evaluate_with_attention(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    runs: Sequence[Row] = rows["emergence"]
    if not has_attention(runs):
        return {"": NotApplicable("the mixer exposes no attention scores")}
    lags = [lag for lag in map(attention_lag, runs) if lag is not None]
    if len(lags) < 2:
        return {"": NotApplicable(f"{len(lags)} run(s) had both a loss drop and an attention jump")}
    margin = settings["margin"]
    above = sign_test([margin - lag for lag in lags], alternative="greater").p  # lag < margin
    below = sign_test([lag + margin for lag in lags], alternative="greater").p  # lag > −margin
    median, low, high = compare.median_interval(lags)
    return {"": Evidence(effect=median, low=low, high=high, p=max(above, below),
                         direction=1 if abs(median) <= margin else -1, n=str(len(lags)),
                         details="lags " + ", ".join(f"{v:+.2f}" for v in sorted(lags)),
                         data={"attention midpoint lag / loss midpoint": lags},
                         guides={f"+{margin}": margin, "0: together": 0.0, f"−{margin}": -margin})}


ABRUPT = register_claim(Claim(
    "abrupt", 2, paper="Emergence is abrupt: a loss plateau, then a sharp drop.", paper_number="-",
    groups=("emergence",), statistic="exact binomial test of the share of abrupt runs against 1/2",
    effect="share of runs whose cells' median transition share ≤ 0.25", predicts="above 1/2",
    settings=frozen(abrupt_share=ABRUPT_SHARE), evaluate=evaluate_abrupt))
WITH_ATTENTION = register_claim(Claim(
    "abrupt-with-attention", 2, paper="Emergence coincides with attention heads jumping from diffuse to "
    "sparse patterns that match the task.", paper_number="-", groups=("emergence",),
    statistic="two one-sided sign tests (TOST) of the lag against ±margin",
    effect="median lag of the attention jump's midpoint behind the loss drop's, relative to the latter",
    predicts="within ±0.25", settings=frozen(margin=0.25), evaluate=evaluate_with_attention,
    kind="equivalence", margin=0.25))
