"""AttentionDistillation: the attention bias, with the pattern taken from a teacher run's model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from emergence_bench.callbacks.attention_bias import AttentionBias
from emergence_bench.registry import register_callback
from emergence_bench.results.store import MAPS_FILE

if TYPE_CHECKING:
    from emergence_bench.tasks.base import SyntheticTask


@register_callback("attention_distillation")
class AttentionDistillation(AttentionBias):
    """logits += factor(step) · strength · T, where T [L, L] is a trained teacher's attention instead
    of the ground truth (the paper's proposal: a teacher with more heads shows a student where to look).

    ``teacher`` is the teacher's run folder; its attention probe saved ``attention_maps.pt`` (each
    head's mean map at its last eval). T for student layer i is the teacher's layer ``teacher_layer``
    (default: the same index): the largest weight any teacher head gives each key, scaled so each
    row's largest entry is 1. Steps, layers, heads, annealing and the report are the bias's.
    """

    def __init__(self, task: SyntheticTask, teacher: str, teacher_layer: int | None = None, strength: float = 5.0,
                 layers: str | int | Sequence[int] = "all", heads: str | int | Sequence[int] = "all",
                 until_step: int | None = None, anneal: bool = False, in_eval: bool = True) -> None:
        super().__init__(task, strength, layers, heads, "teacher", until_step, anneal, in_eval)
        path = Path(teacher) / MAPS_FILE
        if not path.is_file():
            raise ValueError(f"attention_distillation.teacher must be a run folder holding {MAPS_FILE} "
                             f"(a run with the attention probe on), got {teacher!r}")
        saved = torch.load(path)
        self.teacher, self.teacher_layer = teacher, teacher_layer
        self.teacher_maps = dict(zip(saved["layers"], saved["maps"]))  # layer -> [H, L, L]
        size = next(iter(self.teacher_maps.values())).shape[-1]
        if size != task.seq_len:
            raise ValueError(f"attention_distillation.teacher has maps for sequence length {size}, "
                             f"but this task's is {task.seq_len}")

    def pattern(self, layer: int, name: str = "teacher") -> torch.Tensor:
        source = layer if self.teacher_layer is None else self.teacher_layer
        if source not in self.teacher_maps:
            raise ValueError(f"attention_distillation: the teacher has no attention maps for layer {source} "
                             f"(it has {sorted(self.teacher_maps)}); set teacher_layer")
        strongest = self.teacher_maps[source].float().amax(dim=0)  # [L, L]
        return strongest / strongest.amax(dim=-1, keepdim=True).clamp_min(1e-12)

    def report(self) -> dict:
        return {**super().report(), "teacher": self.teacher, "teacher_layer": self.teacher_layer}
