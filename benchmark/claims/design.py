"""The confirmatory design every claim shares, frozen before the confirmation seeds ran.

Settings were chosen on exploration seeds 100–103 of task instance 100 (docs/claims.md gives what
the exploration measured and what it chose); the confirmation reads seeds 0–7 on two task instances
(task_seed 0 and 1), and nothing here may change after their rows exist.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

SEEDS = tuple(range(8))  # the confirmation seeds
TASK_SEEDS = (0, 1)  # two task instances per cell (two A's, two rule pools)
EXPLORATION_SEEDS = (100, 101, 102, 103)  # where the settings were chosen (task_seed 100)
CA_STATE_SIZE = 6  # the cellular-automata cell that ca-heads, ca-depth and mixers-ca vary around


def frozen(**settings: Any) -> MappingProxyType[str, Any]:
    """A claim's settings: the shared design plus its own, read-only."""
    return MappingProxyType({"seeds": SEEDS, "task_seeds": TASK_SEEDS, **settings})
