"""What may end a seed-parallel group early, all its live seeds at once: the ``GroupStop`` protocol,
and each seed's ``Outcome`` it reads. A tuning point's pruning meets it
(``emergence_bench.execution.pruning.Rivals``); the engine imports none of it, so the protocol is
declared here, below the tools that satisfy it."""

from __future__ import annotations

from typing import Protocol

# A seed's state at an eval: ("emerged", its step), ("live", None), ("ended", the step it ended at:
# diverged, or stopped without emerging) or ("failed", None).
Outcome = tuple[str, int | None]


class GroupStop(Protocol):
    """A rule asked after each eval of the whole group whether to end it (``run_seed_parallel``'s
    ``stop``)."""

    def judges(self, run_ids: set[str]) -> bool:
        """Whether it may stop a group training exactly these runs (asked once, before training)."""
        ...

    def check(self, step: int, outcomes: list[Outcome]) -> dict | None:
        """After the eval of ``step``, with each seed's ``Outcome`` in the group's order: a section
        that ends every live seed, recorded in their rows under ``pruned``, or None to train on."""
        ...
