"""A claim of the paper, declared once as a pre-registered test (``claims.judge`` judges it).

A ``Claim`` states what the paper says (its words and its number), the sweep groups it reads, its
statistic and the direction the paper predicts, and every free setting it uses (thresholds,
budgets, seeds, margins), frozen before the confirmation seeds ran. ``evaluate(rows, settings)``
turns a group's result rows into ``Evidence`` (the effect with its 95% interval, the test's p and
which way the effect went), one per compared arm (a claim about "the recurrent mixers" yields one
per mixer it finds), or ``NotApplicable`` with the reason (a mixer without attention scores, an arm
the folder lacks).

The built-in claims are declared in ``emergence_bench.claims`` (one module per claim of the paper),
whose ``claims()`` gives every declared claim; docs/claims.md lists them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, cast

from emergence_bench import registry
from emergence_bench.measurements import measurement
from emergence_bench.results.row import Row, section, step_budget

Kind = Literal["difference", "equivalence", "fit"]
Rows = Mapping[str, Sequence[Row]]  # sweep group -> its confirmation rows


@dataclass(frozen=True)
class Evidence:
    """One comparison's result. ``effect`` in the claim's ``effect`` units with its 95% interval
    (``low``, ``high``; None: unbounded or not computed); ``p`` the test's p (two-sided, or the TOST p
    of an equivalence, or a fit's goodness-of-fit p); ``direction`` +1 where the effect goes the
    paper's way, −1 the other way, 0 neither; ``n`` the sample sizes as text; ``detectable`` the
    smallest effect these sizes detect with 80% power (text, the effect's units); ``details`` what a
    reader needs beside the effect (per-arm medians); ``data`` each arm's values, for the figure, and
    ``guides`` the lines it draws across them ({label: value}: a threshold, a margin);
    ``smallest_arm``: the fewest runs in an arm it compared (None: not a comparison of arms of runs),
    which must reach the design's count (``design.SEEDS`` × ``design.TASK_SEEDS``) for a verdict."""

    effect: float | None
    low: float | None
    high: float | None
    p: float | None
    direction: int
    n: str
    detectable: str | None = None
    details: str = ""
    data: Mapping[str, Sequence[float]] = field(default_factory=dict)
    guides: Mapping[str, float] = field(default_factory=dict)
    smallest_arm: int | None = None


@dataclass(frozen=True)
class NotApplicable:
    """Why a claim does not apply to these rows (read as ``n/a``)."""

    reason: str


Outcome = Union[Evidence, NotApplicable]


@dataclass(frozen=True)
class Claim:
    """See the module docstring. ``number``: the claim's number in docs/science.md (1–8); ``paper``: its
    words; ``paper_number``: the number the paper gives (or "-"); ``effect``: what the effect
    measures, with its units; ``predicts``: the direction in words; ``margin``: an equivalence's
    margin (in effect units); ``stage``: the confirmation it belongs to, whose rows form one Holm
    family (the first stage's ``"confirmation"``, or a later one on fresh seeds, as ``"replication"``,
    never pooled with it)."""

    id: str
    number: int
    paper: str
    paper_number: str
    groups: tuple[str, ...]
    statistic: str
    effect: str
    predicts: str
    settings: Mapping[str, Any]
    evaluate: Callable[[Rows, Mapping[str, Any]], Mapping[str, Outcome]]
    kind: Kind = "difference"
    margin: float | None = None
    across_mixers: bool = False  # it compares mixers; otherwise each mixer in the rows is judged alone
    stage: str = "confirmation"


CLAIMS: registry.Registry[Claim] = registry.Registry("claim", Claim)


def register_claim(claim: Claim) -> Claim:
    """Adds ``claim`` (its id must be new) and returns it."""
    CLAIMS.add(claim.id, claim)
    return claim


# Reading rows: the arms of a group, and the times a claim compares.

def config_value(row: Row, dotted: str) -> Any:
    """The row's resolved config at ``dotted`` (``callbacks.attention_bias.pattern``); None where absent."""
    value: Any = row["config"]
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def arm(rows: Sequence[Row], **where: Any) -> list[Row]:
    """The rows whose config matches every ``where`` (dotted keys written with ``__`` for ``.``)."""
    return [r for r in rows if all(config_value(r, k.replace("__", ".")) == v for k, v in where.items())]


def confirmation(rows: Sequence[Row], settings: Mapping[str, Any]) -> list[Row]:
    """The trained rows (ok or diverged) of the confirmation seeds and task instances of ``settings``."""
    seeds, instances = set(settings["seeds"]), settings.get("task_seeds")
    return [r for r in rows if r["status"] in ("ok", "diverged") and r["seed"] in seeds
            and (instances is None or config_value(r, "task.task_seed") in instances)]


def event_times(rows: Sequence[Row], measurement: str, field_name: str) -> tuple[list[float], list[bool]]:
    """Each run's step of ``section(row, measurement)[field_name]`` (the emergence step, the plateau
    end), censored at the run's budget where it never got there: (times, censored)."""
    times, censored = [], []
    for r in rows:
        step = section(r, measurement).get(field_name)  # type: ignore[call-overload]
        times.append(float(step) if step is not None else float(step_budget(r)))
        censored.append(step is None)
    return times, censored


def never_as_inf(times: Sequence[float], censored: Sequence[bool]) -> list[float]:
    """Censored times as ``inf`` (ranked after every event), for rank tests."""
    return [math.inf if c else t for t, c in zip(times, censored)]


def final_metric(rows: Sequence[Row], key: str) -> list[float]:
    """The runs' ``metrics[key]`` (a final loss), leaving out runs without one."""
    values: list[Any] = [cast(Mapping[str, Any], section(r, "metrics")).get(key) for r in rows]
    return [float(v) for v in values if v is not None]


def has_attention(rows: Sequence[Row]) -> bool:
    """Whether these rows' mixer exposes attention scores (their attention probe applied)."""
    probe = measurement("attention_probe")  # (the registry's: claims sit above the callbacks that declare it)
    return any(probe.read(r).get("applicable", bool(probe.read(r))) for r in rows)
