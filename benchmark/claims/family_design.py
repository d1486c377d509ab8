"""The language family's Part-1 claims (the paper's first half, on ``lm-family``): the design the three
share, declared before any family seed trained.

``lm-family analyze`` writes one ``analyze pythia`` row per seed and probe: the probe's emergence step,
bisected over the log-spaced checkpoints (``emergence``: ``first_solved``, ``last_unsolved``), every
head's induction and previous-token scores at every checkpoint (``head_scores.history``), and head
patching between the bracketing pair (``patching.top_k``, ``patching.all_heads``). The three claims
read those rows, as the synthetic claims read a sweep's: ``family_seeds`` (claim 1), ``family_heads``
(claim 2), ``family_patching`` (claim 3); ``family_judge`` judges them.

What they share, fixed here:

- ``PROBE``, in-context repetition: its answer is the word that followed the query's word the first
  time, which is what an induction head reads (the head scores' own diagnostic), and its six words
  are distinct, so the copy is unambiguous (string repetition draws 8 of 10 symbols with repeats: an
  earlier occurrence can point at the wrong answer). The other probes stay in family.json, described.
- Solved at a greedy accuracy of ``SOLVED_AT`` = 0.5 on ``PROMPTS`` = 64 prompts in the corpus's
  words: the analysis's defaults. A row analysed otherwise is another measurement, and is not read.
- Every seed the family trained to the end counts. The family's size is the pilot's to choose, so
  no seed list is fixed here, and no seed may be left out after the fact.
- ``MIN_SEEDS`` = 4 (the family's default): a claim read on fewer seeds gives its numbers and no verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

STAGE = "language-family"  # its own Holm family, never pooled with the synthetic claims' stages
GROUP = "lm-family"  # the rows the claims read: the family's analysis rows
PROBE = "in_context_repetition"
SOLVED_AT = 0.5
PROMPTS = 64
LEXICON = "shakespeare"
MIN_SEEDS = 4

FamilyRow = Mapping[str, Any]  # an ``analyze pythia`` row (analysis/pythia.py), not a training run's


def frozen(**settings: Any) -> MappingProxyType[str, Any]:
    """A family claim's settings: the shared design plus its own, read-only."""
    return MappingProxyType({"probe": PROBE, "solved_at": SOLVED_AT, "prompts": PROMPTS, "lexicon": LEXICON,
                             "min_seeds": MIN_SEEDS, **settings})


def measured_as_declared(row: FamilyRow) -> bool:
    """Whether ``row`` is the declared measurement: the probe, its prompts, its words, solved at 0.5."""
    task = row["config"]["task"]
    return (task.get("name") == "language_probe" and task.get("probe") == PROBE and task.get("single") is False
            and task.get("prompts") == PROMPTS and task.get("lexicon") == LEXICON
            and task.get("threshold") == SOLVED_AT)


def declared_rows(rows: Sequence[FamilyRow]) -> tuple[list[FamilyRow], str]:
    """The rows of the declared measurement (one per seed; a failed analysis included) and, where there
    are none, what ``rows`` measured instead. Two rows of one seed are a ValueError: which to read
    would be a choice made after the data."""
    found = [row for row in rows if measured_as_declared(row)]
    seeds = [row["seed"] for row in found]
    twice = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if twice:
        raise ValueError(f"seed(s) {', '.join(map(str, twice))} have two rows of {PROBE}: judge one analysis")
    if found or not rows:
        return sorted(found, key=lambda row: row["seed"]), "" if found else "the family has no analysed seed"
    measured = sorted({_measurement(row) for row in rows})
    return [], (f"no row measured {PROBE} on {PROMPTS} prompts in {LEXICON} words, solved at {SOLVED_AT:g} "
                f"(the declared measurement); the rows measured {'; '.join(measured)}")


def _measurement(row: FamilyRow) -> str:
    task = row["config"]["task"]
    return (f"{task.get('probe')} on {task.get('prompts')} prompts in {task.get('lexicon', 'modern')} words, "
            f"solved at {task.get('threshold')}" + (" (the single prompt)" if task.get("single") else ""))


def analysed(rows: Sequence[FamilyRow]) -> list[FamilyRow]:
    """The rows whose analysis finished (a failed one has no numbers to read)."""
    return [row for row in rows if row["status"] == "ok"]


def emerged(row: FamilyRow) -> bool:
    """Whether the seed solved the probe at some checkpoint (bisected)."""
    return row["emergence"]["first_solved"] is not None
