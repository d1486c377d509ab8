"""The attention probe (``callbacks/attention_probe.py`` records it): per layer and head, how diffuse
attention is and how much of it sits on the true sources, and when some head first found the pattern."""

from __future__ import annotations

from typing import TypedDict

from emergence_bench.measurements import register_measurement
from emergence_bench.results.columns import Median
from emergence_bench.results.measurement import Measurement
from emergence_bench.results.row import Row


class BestHead(TypedDict):
    layer: int
    head: int
    mass: float


class AttentionProbeSection(TypedDict, total=False):
    applicable: bool  # False (with not_applicable, and nothing else) for a mixer without scores
    not_applicable: str
    layers: list[int]
    found_mass: float
    pattern_found_step: int | None
    censored: bool
    best_head: BestHead | None
    final_entropy: list[list[float]]  # [layer][head]
    final_mass: list[list[float]]
    history: list[list[float]]  # [step, best mass, lowest entropy] per eval


def _applicable(row: Row) -> bool:
    """Whether the run's mixer has attention scores to probe (else its section says why not)."""
    return bool(ATTENTION_PROBE.read(row).get("applicable"))  # (bound below, before any row is read)


ATTENTION_PROBE = register_measurement(Measurement(
    "attention_probe", section="attention_probe", fields=AttentionProbeSection, applies=_applicable,
    columns=(Median("median_pattern_found", "pattern_found_step", measured="probed", header="median pattern found"),),
    figures=("filmstrip", "maps"), pattern_probe=True))
