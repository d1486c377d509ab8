"""The suite's one training step, and the buffer its losses wait in on the device.

``step(module, tokens, batch_idx)`` is the training step of a single run (``EmergenceModule``), of a
seed-parallel stack (``SeedStack``: K seeds at once) and of `emergence-bench speed`, which times
this very function. It computes one batch's losses, keeps them in the module's ``LossBuffer``, reads
the buffer back when due, and returns the loss to train on. What follows it (backward, clipping,
AdamW, the lr schedule) is Lightning's automatic optimisation in a run.

What ``step``, ``update`` and ``StepLoop`` need of a module is the ``Trainable`` protocol below; this
module imports none of the modules that satisfy it (``EmergenceModule``, ``SeedStack``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import lightning as L
import torch
import torch.nn.functional as F

from emergence_bench.tasks.base import SyntheticTask


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


def scored_rows(task: SyntheticTask) -> torch.Tensor:
    """[N] the indices of the rows ``task.loss_mask`` scores. Indices, not the boolean mask: they vmap."""
    return task.loss_mask.nonzero().squeeze(1)


def scored(logits: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [..., L, V], targets [..., L], rows [N] (``scored_rows``) -> the scored rows of both,
    [..., N, V] and [..., N]."""
    return logits.index_select(-2, rows), targets.index_select(-1, rows)


def sequence_mask(task: SyntheticTask, tokens: torch.Tensor) -> torch.Tensor | None:
    """tokens [B, L+1] -> the rows scored in each sequence [B, L] bool when the task's scored rows
    differ per sequence (``per_sequence_scoring``), else None: its ``scored_rows`` serve every sequence."""
    return task.scored_mask(tokens) if task.per_sequence_scoring else None


def train_losses(logits: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor,
                 train_on: str = "scored", mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, L, V], targets [B, L], rows [N] (``scored_rows``) -> (the scored rows' loss,
    every row's loss), both scalars. Only the one ``train_on`` names keeps its autograd graph.
    With ``mask`` [B, L] bool (``sequence_mask``), the scored loss is the mean over the rows it
    marks, each sequence its own, instead of over ``rows``."""
    full = F.cross_entropy((logits if train_on == "all" else logits.detach()).flatten(0, 1), targets.flatten())
    if mask is not None:
        source = logits.detach() if train_on == "all" else logits
        per_row = F.cross_entropy(source.flatten(0, 1), targets.flatten(), reduction="none")  # [B·L]
        mask = mask.flatten()
        return torch.where(mask, per_row, 0.0).sum() / mask.sum(), full
    logits, targets = scored(logits, targets, rows)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), full


def check_finite(scored: float, full: float, step: int) -> None:
    """Raise Diverged when a training loss is NaN or infinite."""
    for value in (scored, full):
        if not math.isfinite(value):
            raise Diverged(f"training loss became {value} at step {step}")


def finite_prefix(scored: list[float], full: list[float], steps: list[int]) -> tuple[int, Diverged | None]:
    """How many of the steps read back come before the first non-finite loss, and that loss's
    Diverged (None when every loss is finite)."""
    for i, step in enumerate(steps):
        try:
            check_finite(scored[i], full[i], step)
        except Diverged as error:
            return i, error
    return len(steps), None


class LossBuffer:
    """The losses of the steps not read back yet, kept on the device: read every ``every`` steps and
    at step ``max_steps - 1`` (one host sync per read, not per step).

    ``append(batch_idx, losses [2, *S])`` (detached) with S = () for a run, (K,) for K seeds; ``read()`` gives
    (the steps, the scored losses [n, *S], the every-row losses [n, *S]) as lists and empties it.
    """

    def __init__(self, every: int = 1, max_steps: int | None = None) -> None:
        self.every, self.max_steps = every, max_steps
        self.pending: list[torch.Tensor] = []
        self.first = 0  # the step of pending[0]

    def append(self, batch_idx: int, losses: torch.Tensor) -> None:
        if not self.pending:
            self.first = batch_idx
        self.pending.append(losses)

    def due(self, batch_idx: int) -> bool:
        """Whether the buffer is read back after step ``batch_idx``."""
        return (batch_idx + 1) % self.every == 0 or batch_idx + 1 == self.max_steps

    def read(self) -> tuple[list[int], list, list]:
        values = torch.stack(self.pending).tolist() if self.pending else []  # [n][2](...)
        steps = list(range(self.first, self.first + len(values)))
        self.pending = []
        return steps, [v[0] for v in values], [v[1] for v in values]

    def state_dict(self) -> dict:
        """The values not read yet (a resume point's): ``{"first", "pending": [n, 2, *S] or None}``, on the CPU."""
        return {"first": self.first, "pending": torch.stack(self.pending).cpu() if self.pending else None}

    def load_state_dict(self, state: dict, device: torch.device) -> None:
        pending = state["pending"]
        self.first = state["first"]
        self.pending = [] if pending is None else list(pending.to(device).unbind(0))


class Trainable(Protocol):
    """A module the step trains: a single run's (losses are scalars) or a stack's (losses [K]).

    losses(tokens) -> (scored, full): the scored rows' and every row's loss of a batch
    train_on:        "scored" or "all", which of the two is trained on
    batch_order:     "drawn" or "reversed": the batch's sequences as drawn, or in reverse order
    loss_buffer:     where the detached losses wait for the next read
    read_losses(at_step): read the buffer back (and hand the losses to the callbacks)
    The rest is a LightningModule's: ``training_step`` (which calls ``step``), ``backward``,
    ``parameters``, ``configure_optimizers`` and ``configure_gradient_clipping``.
    """

    train_on: str
    batch_order: str
    loss_buffer: LossBuffer

    def losses(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def read_losses(self, at_step: bool) -> Any: ...

    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> Any: ...

    def backward(self, loss: torch.Tensor) -> None: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def configure_optimizers(self) -> Any: ...

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float,
                                    gradient_clip_algorithm: str) -> None: ...


def step(module: Trainable, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor:
    """One training step of ``module`` on ``tokens`` (its batch: [B, L+1], or [K, B, L+1] for K seeds):
    the losses kept in its buffer, read back when due, and the loss to train on returned (a scalar,
    or [K]: per ``module.train_on``, the scored rows' or every row's)."""
    if module.batch_order == "reversed":
        tokens = tokens.flip(-2)  # the same sequences: their losses and gradients summed in another order
    scored_loss, full = module.losses(tokens)
    module.loss_buffer.append(batch_idx, torch.stack([scored_loss.detach(), full.detach()]))
    if module.loss_buffer.due(batch_idx):
        module.read_losses(at_step=True)
    return full if module.train_on == "all" else scored_loss


def update(module: Trainable, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
           scheduler: torch.optim.lr_scheduler.LRScheduler, clip: float | None) -> None:
    """What Lightning's automatic optimisation does after ``step`` in a run, here without a Trainer
    (for the batching probe and `speed`, which time the step alone): the module's ``backward``,
    clipping to gradient norm ``clip`` (as the Trainer's ``gradient_clip_val``: the module's own
    ``configure_gradient_clipping`` where it has one, per seed in a stack), AdamW, the lr schedule."""
    optimizer.zero_grad(set_to_none=True)
    module.backward(loss)
    if clip:
        if type(module).configure_gradient_clipping is L.LightningModule.configure_gradient_clipping:
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip)  # what Lightning's default calls
        else:
            module.configure_gradient_clipping(optimizer, clip, "norm")
    optimizer.step()
    scheduler.step()


class StepLoop:
    """``module`` trained without a Trainer, step after step as a run trains it: ``step`` (through
    ``module.training_step``), then ``update``. Batch i is ``batches(i)`` ([B, L+1], or [K, B, L+1]
    for a stack). What `speed` and the batching probe time: the suite's step and nothing else.
    ``data_seconds`` sums the time spent making batches."""

    def __init__(self, module: Trainable, batches: Callable[[int], torch.Tensor],
                 clip: float | None, device: str | torch.device) -> None:
        self.module, self.batches, self.clip, self.device = module, batches, clip, torch.device(device)
        optim = module.configure_optimizers()
        self.optimizer, self.scheduler = optim["optimizer"], optim["lr_scheduler"]["scheduler"]
        self.index, self.data_seconds = 0, 0.0

    def step(self) -> None:
        start = time.perf_counter()
        tokens = self.batches(self.index).to(self.device)
        self.data_seconds += time.perf_counter() - start
        loss = self.module.training_step(tokens, self.index)
        assert loss is not None  # a stack returns None only once every seed has ended
        update(self.module, loss, self.optimizer, self.scheduler, self.clip)
        self.index += 1

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
