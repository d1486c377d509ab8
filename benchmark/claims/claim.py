"""A claim of the paper, declared once as a pre-registered test, and the scorecard that judges it.

A ``Claim`` states what the paper says (its words and its number), the sweep groups it reads, its
statistic and the direction the paper predicts, and every free setting it uses (thresholds,
budgets, seeds, margins), frozen before the confirmation seeds ran. ``evaluate(rows, settings)``
turns a group's result rows into ``Evidence`` (the effect with its 95% interval, the test's p and
which way the effect went), one per compared arm (a claim about "the recurrent mixers" yields one
per mixer it finds), or ``NotApplicable`` with the reason (a mixer without attention scores, an arm
the folder lacks).

``scorecard(folder_rows)`` judges every registered claim:

- ``p`` is Holm-adjusted over every claim row that has a p;
- a ``difference`` claim ``agrees`` when the adjusted p < 0.05 and the effect goes the paper's way,
  ``disagrees`` when it is significant the other way, and is ``inconclusive`` otherwise, with the
  smallest effect this many seeds could have detected;
- an ``equivalence`` claim (two things coincide) agrees when its p (two one-sided tests against
  the margin) is below 0.05 after adjustment, disagrees when the effect's interval lies outside the
  margin, and is inconclusive otherwise;
- a ``fit`` (a model of the data: "each head finds the pattern independently") disagrees when its
  goodness-of-fit test rejects it, and is otherwise inconclusive (consistent with the data, which is
  not evidence for it).

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
from emergence_bench.stats.significance import holm

ALPHA = 0.05
Verdict = Literal["agrees", "disagrees", "inconclusive", "n/a", "not run"]
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
    margin (in effect units)."""

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


# Judging.

@dataclass(frozen=True)
class ScoreRow:
    """One line of the scorecard: a claim (and the arm it compares, ``label``) with its verdict."""

    claim: Claim
    label: str
    outcome: Outcome | None  # None: its groups have no rows (not run)
    p_adjusted: float | None
    verdict: Verdict
    reason: str

    def to_dict(self) -> dict[str, Any]:
        e = self.outcome if isinstance(self.outcome, Evidence) else None
        return {"claim": self.claim.id + (f"[{self.label}]" if self.label else ""), "number": self.claim.number,
                "paper": self.claim.paper, "paper_number": self.claim.paper_number,
                "groups": list(self.claim.groups), "statistic": self.claim.statistic, "effect_measures": self.claim.effect,
                "predicts": self.claim.predicts, "effect": e.effect if e else None, "low": e.low if e else None,
                "high": e.high if e else None, "p": e.p if e else None, "p_holm": self.p_adjusted,
                "n": e.n if e else None, "detectable": e.detectable if e else None,
                "details": e.details if e else "", "verdict": self.verdict, "reason": self.reason,
                "settings": dict(self.claim.settings)}


def design_runs(claim: Claim) -> int:
    """The runs a cell of the claim's design holds: its seeds × its task instances."""
    return len(claim.settings["seeds"]) * len(claim.settings.get("task_seeds") or (None,))


def complete(claim: Claim, evidence: Evidence) -> bool:
    """Whether every arm the evidence compared holds the design's runs (an unfinished group, or a
    run that failed, does not: it never gets a verdict)."""
    return evidence.smallest_arm is None or evidence.smallest_arm >= design_runs(claim)


def _verdict(claim: Claim, evidence: Evidence, p: float | None) -> tuple[Verdict, str]:
    if not complete(claim, evidence):
        return "inconclusive", f"an arm has {evidence.smallest_arm} of the design's {design_runs(claim)} runs"
    if p is None:
        return "inconclusive", "no test could be computed"
    significant = p < ALPHA
    if claim.kind == "fit":
        return ("disagrees", "the fit is rejected") if significant else \
            ("inconclusive", "the fit is not rejected (consistent with it, not evidence for it)")
    if claim.kind == "equivalence":
        margin = claim.margin or 0.0
        outside = evidence.low is not None and evidence.high is not None and \
            (evidence.low > margin or evidence.high < -margin)
        if significant:
            return "agrees", f"within ±{margin:g}"
        if outside:
            return "disagrees", f"the interval lies outside ±{margin:g}"
        return "inconclusive", f"the interval reaches past ±{margin:g}"
    if significant and evidence.direction > 0:
        return "agrees", "significant, the paper's way"
    if significant and evidence.direction < 0:
        return "disagrees", "significant, the other way"
    detectable = f"; these seeds detect {evidence.detectable}" if evidence.detectable else ""
    return "inconclusive", ("significant, but mixed in direction" if significant else "not significant") + detectable


def judged_per_mixer(claim: Claim, rows: Rows) -> dict[str, Outcome]:
    """The claim's outcomes on ``rows``; where the rows hold several mixers and the claim does not
    compare mixers, each mixer's rows judged alone, labelled by its name."""
    names = sorted({config_value(r, "mixer.name") for group in rows.values() for r in group})
    if claim.across_mixers or len(names) < 2:
        return dict(claim.evaluate(rows, claim.settings))
    outcomes: dict[str, Outcome] = {}
    for name in names:
        own = {g: [r for r in group if config_value(r, "mixer.name") == name] for g, group in rows.items()}
        lacking = [g for g, group in own.items() if not group]
        if lacking:
            outcomes[name] = NotApplicable(f"no {name} rows in group(s) {', '.join(lacking)}")
            continue
        for label, found in claim.evaluate(own, claim.settings).items():
            outcomes[name + (f", {label}" if label else "")] = found
    return outcomes


def scorecard(rows: Rows, judged: Sequence[Claim]) -> list[ScoreRow]:
    """The ``judged`` claims (``emergence_bench.claims.claims()``: every declared one) on ``rows``
    (sweep group -> result rows; each claim keeps its confirmation seeds), p Holm-adjusted over the
    rows that have one."""
    pending: list[tuple[Claim, str, Outcome | None, str]] = []
    for claim in judged:
        missing = [g for g in claim.groups if not confirmation(rows.get(g, ()), claim.settings)]
        if missing:
            pending.append((claim, "", None, f"no confirmation rows in group(s) {', '.join(missing)}"))
            continue
        picked = {g: confirmation(rows[g], claim.settings) for g in claim.groups}
        for label, found in judged_per_mixer(claim, picked).items():
            pending.append((claim, label, found, found.reason if isinstance(found, NotApplicable) else ""))
    # The Holm family: every row that gets a verdict (an unfinished arm gets none, so it does not count).
    adjusted = holm([o.p if isinstance(o, Evidence) and complete(claim, o) else None for claim, _, o, _ in pending])
    card = []
    for (claim, label, outcome, reason), p in zip(pending, adjusted):
        if outcome is None:
            card.append(ScoreRow(claim, label, None, None, "not run", reason))
        elif isinstance(outcome, NotApplicable):
            card.append(ScoreRow(claim, label, outcome, None, "n/a", reason))
        else:
            verdict, why = _verdict(claim, outcome, p)
            card.append(ScoreRow(claim, label, outcome, p, verdict, why))
    return card
