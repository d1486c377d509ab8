"""What a callback may read from the module it is handed: ``EvalResult`` and ``MeasuredModule``;
and the one hook the suite adds to Lightning's, ``on_train_losses``.

Both training engines honour this contract: a single run's ``EmergenceModule`` is one, and under
seed-parallel each seed's callbacks get a per-seed view that is one. A callback that reads only what
is written here works the same in both.

Training losses stay on the device and are read back every ``trainer.log_every`` steps (one host
sync per read), at the last step and at the end of training. Every step's loss reaches the
callbacks that define::

    def on_train_losses(self, trainer, pl_module, steps: list[int], losses: list[float]) -> None

``steps`` are step indices (0 = the first update) and ``losses`` their scored-token losses, in order,
each step exactly once. It is called during the training step of a read (before that step's
``on_train_batch_end``), and for the last ones at the end of training (before ``on_train_end``).

The hooks annotate ``pl_module`` as ``Any``: Lightning's ``Callback`` declares a ``LightningModule``,
which a seed-parallel ``SeedView`` is not, and an override cannot narrow it to ``MeasuredModule``.
The helpers a hook hands it to take ``MeasuredModule``. ``trainer`` is ``L.Trainer``, or ``Any`` where
a hook reads ``trainer.callbacks`` (Lightning sets it without declaring it to mypy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from emergence_bench.mixers.base import MixerContext


@dataclass(frozen=True)
class EvalResult:
    """One evaluation on the task's fixed eval set, scored tokens only unless said otherwise.

    step:               the global step it was taken at (after that many optimiser steps)
    loss:               mean cross-entropy of the scored tokens
    accuracy:           greedy accuracy of the scored tokens
    p_correct:          mean probability of the correct token
    full_sequence_loss: mean cross-entropy over every row (the paper's scale)
    full_sequence_accuracy: greedy accuracy over every row (what the scored rows leave out, e.g. Dyck's
                        openers when it scores closers)
    cell_accuracy:      [C] accuracy per output cell
    cell_loss:          [C] loss per output cell
    """

    step: int
    loss: float
    accuracy: float
    p_correct: float
    full_sequence_loss: float
    full_sequence_accuracy: float
    cell_accuracy: torch.Tensor
    cell_loss: torch.Tensor


class MeasuredModel(Protocol):
    """What a callback may use of the model (the engine's ``SequenceModel`` is one).

    mixers:  the token mixer of each layer, in order (read its facts: ``exposes_attention``, ``n_heads``)
    __call__(tokens [B, L], ctx) -> logits [B, L, V]
    """

    @property
    def mixers(self) -> list[nn.Module]: ...

    def __call__(self, tokens: torch.Tensor, ctx: MixerContext | None = None) -> torch.Tensor: ...


class MeasuredModule(Protocol):
    """The ``pl_module`` a callback sees.

    model:               the SequenceModel (read it in each hook: under seed-parallel it is this seed's
                         weights as of now)
    task:                the task (a SyntheticTask DataModule)
    device:              where the model's tensors live
    global_step:         optimiser steps taken so far
    last_train_loss:     scored-token loss of the latest step read back (at most ``log_every`` steps old;
                         a callback that needs every step's loss takes ``on_train_losses``)
    recent_train_losses: the scored losses of the last ``FINAL_LOSS_WINDOW`` steps read back
    recent_full_sequence_losses: the every-row losses of the same steps
    last_eval:           the latest evaluation, None before the first
    attention_bias:      layer -> additive logits bias used by the next forwards (callbacks set it)
    """

    model: nn.Module
    task: object
    device: torch.device
    global_step: int
    last_train_loss: float
    recent_train_losses: Sequence[float]
    recent_full_sequence_losses: Sequence[float]
    last_eval: EvalResult | None
    attention_bias: dict[int, torch.Tensor]
