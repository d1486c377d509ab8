"""EmergenceModule: trains a SequenceModel on a task's scored tokens and measures it.

The pieces a single run and a seed-parallel group share: the training step and its loss buffer
(``emergence_bench.engine.training``), a run's losses and how it takes them in (``RunLosses``),
``EvalTally`` (one eval pass, per output cell, for one seed or K) and the optimiser
(``emergence_bench.engine.optim``). Seed-parallel's seed stack and seed views use the same ones.
"""

from __future__ import annotations

from typing import Any, cast

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric, Metric
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.wrappers import MultioutputWrapper

from emergence_bench.callbacks.contract import EvalResult
from emergence_bench.config import TRAIN_ON, OptimConfig
from emergence_bench.engine import training
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.optim import adamw, is_decayed
from emergence_bench.engine.run_losses import RunLosses
from emergence_bench.engine.training import LossBuffer, scored, scored_rows
from emergence_bench.mixers.base import MixerContext
from emergence_bench.tasks.base import SyntheticTask

MAX_LOGGED_CELLS = 64  # beyond this many output cells, per-cell scalars drown the dashboard


class EvalTally:
    """One eval pass for K seeds (K = 1 for a single run): torchmetrics per seed, and sums per output cell.

    ``add(logits [K, B, L, V], targets [B, L], mask)`` once per eval batch, ``mask`` [B, L] bool the
    rows scored in each sequence (``training.sequence_mask``), or None for the task's ``scored_rows`` in
    every sequence; ``results(step)`` gives one EvalResult per seed. Each headline metric is a
    torchmetrics metric wrapped per seed (``MultioutputWrapper``: one metric per seed, slice k of the
    inputs to seed k's): greedy accuracy (``MulticlassAccuracy``, micro: correct scored tokens over
    scored tokens) of the scored rows and of every row, the scored rows' mean loss and mean
    probability of the correct token and every row's mean loss (``MeanMetric``, in float64, so the
    order of batches does not matter).
    """

    def __init__(self, task: SyntheticTask, seeds: int, device: torch.device) -> None:
        self.rows = scored_rows(task).to(device)  # [N]
        self.cells = task.output_cell.to(device).index_select(0, self.rows)  # [N] output cell of each

        def per_seed(metric: Metric, dtype: torch.dtype | None = None) -> MultioutputWrapper:
            # remove_nans=False: no NaN filtering (a host sync per seed and batch); a NaN shows in the result.
            wrapper = MultioutputWrapper(metric, seeds, output_dim=0, remove_nans=False).to(device)
            if dtype is not None:  # after .to(), which resets it
                for seed_metric in wrapper.metrics:
                    cast(Metric, seed_metric).set_dtype(dtype)
            return wrapper

        mean = lambda: per_seed(MeanMetric(nan_strategy="disable"), torch.float64)  # noqa: E731
        accuracy = lambda: per_seed(MulticlassAccuracy(task.vocab_size, average="micro", validate_args=False))  # noqa: E731
        self.accuracy, self.full_accuracy = accuracy(), accuracy()
        self.output_cell = task.output_cell.to(device)  # [L]
        self.loss, self.p_correct, self.full_sequence = mean(), mean(), mean()
        # Per output cell, a hand count: torchmetrics has no grouped reduction, and one MeanMetric per seed
        # and cell took 1.2-2.5 s per eval pass (K = 16 seeds, 32 cells, 4 batches of 64; 2 loaded CPU
        # cores), against 0.18 s for this whole tally.
        zeros = lambda: torch.zeros(seeds, task.num_cells, dtype=torch.float64, device=device)  # noqa: E731
        self.cell_sums = {"loss": zeros(), "correct": zeros(), "count": zeros()}

    def add(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        every_row = F.cross_entropy(logits.flatten(0, 2), targets.expand(logits.shape[:-1]).flatten(),
                                    reduction="none").view(logits.shape[:-1])  # [K, B, L]
        self.full_sequence.update(every_row.flatten(1))
        every_prediction = logits.argmax(-1)  # [K, B, L]
        self.full_accuracy.update(every_prediction.flatten(1), targets.expand(every_prediction.shape).flatten(1))
        if mask is None:  # the task's rows in every sequence
            (loss, _), (logits, targets) = (scored(every_row.unsqueeze(-1), targets, self.rows),
                                            scored(logits, targets, self.rows))
            loss = loss.squeeze(-1).flatten(1)  # [K, B·N]
            predicted, targets = logits.argmax(-1).flatten(1), targets.expand(len(loss), -1, -1).flatten(1)  # [K, B·N]
            index = self.cells.expand(logits.shape[1], -1).flatten()  # [B·N]
        else:  # each sequence's own rows: M of the B·L in all
            loss, predicted = every_row[:, mask], every_prediction[:, mask]  # [K, M]
            targets = targets[mask].expand(len(loss), -1)  # [K, M]
            index = self.output_cell.expand(mask.shape)[mask]  # [M]
        self.accuracy.update(predicted, targets)
        self.loss.update(loss)
        self.p_correct.update((-loss).exp())
        per_token = {"loss": loss, "correct": predicted == targets, "count": torch.ones_like(loss)}
        for key, value in per_token.items():
            self.cell_sums[key].index_add_(1, index, value.double())

    def results(self, step: int) -> list[EvalResult]:
        accuracy, loss, p_correct, full, full_accuracy = (
            m.compute().cpu().tolist()
            for m in (self.accuracy, self.loss, self.p_correct, self.full_sequence, self.full_accuracy))
        s = self.cell_sums
        cell_accuracy, cell_loss = (s["correct"] / s["count"]).float().cpu(), (s["loss"] / s["count"]).float().cpu()
        return [EvalResult(step=step, loss=loss[k], accuracy=accuracy[k], p_correct=p_correct[k],
                           full_sequence_loss=full[k], full_sequence_accuracy=full_accuracy[k],
                           cell_accuracy=cell_accuracy[k], cell_loss=cell_loss[k])
                for k in range(len(loss))]


def eval_metrics(e: EvalResult) -> dict[str, float]:
    """The TensorBoard scalars of one eval."""
    metrics = {"eval/loss": e.loss, "eval/accuracy": e.accuracy, "eval/p_correct": e.p_correct,
               "eval/full_sequence_loss": e.full_sequence_loss, "eval/full_sequence_accuracy": e.full_sequence_accuracy}
    if len(e.cell_accuracy) <= MAX_LOGGED_CELLS:
        metrics.update({f"eval_cell_accuracy/{i}": float(a) for i, a in enumerate(e.cell_accuracy)})
        metrics.update({f"eval_cell_loss/{i}": float(v) for i, v in enumerate(e.cell_loss)})
    return metrics


class EmergenceModule(RunLosses, L.LightningModule):
    """Cross-entropy over ``task.loss_mask`` (or every row, ``train_on="all"``, as the paper trains);
    AdamW with warmup and a schedule. The model reads ``task.model_inputs(tokens)``.

    Logs ``train/loss`` (scored rows), ``train/full_sequence_loss`` (every row: the paper's scale)
    and, at each eval, ``eval/loss``, ``eval/accuracy`` (greedy, scored tokens), ``eval/p_correct``
    (mean probability of the correct token), ``eval/full_sequence_loss`` and
    ``eval/full_sequence_accuracy`` (every row) and per output cell accuracy and loss. A task whose
    scored rows differ per sequence (``per_sequence_scoring``) is scored on each sequence's own
    (``task.scored_mask``). It is the ``MeasuredModule`` callbacks read (callbacks/contract.py).

    ``attention_bias`` (layer -> logits bias) is applied to training and eval forwards; interventions
    set it. ``initial_optimizer_state`` carries AdamW's moments in from a curriculum stage.

    Each step's losses stay on the device and are read back every ``read_every`` steps (the run's
    ``log_every``), at the last step and at the end of training: one host sync per read, not per
    step. A read checks every step's loss (a NaN raises Diverged naming the step where it appeared,
    so a run stops at the read after it), logs the read step's losses, and hands all of them to the
    callbacks' ``on_train_losses``.
    """

    rows: torch.Tensor  # a buffer: the scored rows [N]

    def __init__(self, model: SequenceModel, task: SyntheticTask, optim: OptimConfig, max_steps: int,
                 train_on: str = "scored", initial_optimizer_state: dict | None = None, read_every: int = 1,
                 batch_order: str = "drawn") -> None:
        super().__init__()
        if train_on not in TRAIN_ON:
            raise ValueError(f"trainer.train_on must be one of {', '.join(TRAIN_ON)}, got {train_on!r}")
        self.model = model
        self.task = task
        self.optim = optim
        self.max_steps = max_steps
        self.train_on = train_on
        self.batch_order = batch_order  # trainer.batch_order: the step reverses each batch's sequences
        self.initial_optimizer_state = initial_optimizer_state
        self.register_buffer("rows", scored_rows(task), persistent=False)  # [N]
        self.attention_bias: dict[int, torch.Tensor] = {}
        self.start_losses()
        self.loss_buffer = LossBuffer(read_every, max_steps)  # per step not read yet: [2] (scored, every-row loss)
        self._unread: dict | None = None  # a resume point's unread losses, until the module is on its device

    def all_rows(self, tokens: torch.Tensor, ctx: MixerContext | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, L+1] -> (logits [B, L, V], targets [B, L]) on every query row."""
        return self.model(self.task.model_inputs(tokens), ctx), tokens[:, 1:]

    # --- training -----------------------------------------------------------------------------
    def losses(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, L+1] -> (the scored rows' loss, every row's loss), scalars."""
        logits, targets = self.all_rows(tokens, MixerContext(bias=self.attention_bias))
        return training.train_losses(logits, targets, self.rows, self.train_on,
                                     training.sequence_mask(self.task, tokens))

    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return training.step(self, tokens, batch_idx)

    def read_losses(self, at_step: bool = False) -> None:
        """Read back the losses kept on the device (one host sync), check them, hand them on; at a
        step's read (``at_step``) also log that step's."""
        steps, values, full_values = self.loss_buffer.read()
        if not steps:
            return
        diverged = self.take_losses(steps, values, full_values)
        if diverged is not None:
            raise diverged
        if self._trainer is None:  # trained outside a Trainer (speed's loop)
            return
        self.deliver_losses(getattr(self.trainer, "callbacks"), self.trainer, steps, values)  # set by Lightning
        if at_step:  # Lightning writes logs every log_every steps, the value of that step: the read step's.
            self.log_dict(self.step_metrics())

    def on_train_epoch_end(self) -> None:
        self.read_losses()  # the tail of a run stopped between reads, before the callbacks' on_train_end

    # --- evaluation ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._tally = EvalTally(self.task, 1, self.device)

    def validation_step(self, tokens: torch.Tensor, batch_idx: int) -> None:
        logits, targets = self.all_rows(tokens, MixerContext(bias=self.attention_bias))
        self._tally.add(logits.unsqueeze(0), targets, training.sequence_mask(self.task, tokens))

    def on_validation_epoch_end(self) -> None:
        self.last_eval = self._tally.results(self.global_step)[0]
        self.log_dict(eval_metrics(self.last_eval))

    # --- resume points (emergence_bench.engine.resume_point) -------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["run_losses"] = {"losses": self.losses_state(), "unread": self.loss_buffer.state_dict()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint["run_losses"]
        self.load_losses_state(saved["losses"])
        self._unread = saved["unread"]

    def on_fit_start(self) -> None:
        if self._unread is not None:  # Lightning restores before it moves the module to its device
            self.loss_buffer.load_state_dict(self._unread, self.device)
            self._unread = None

    # --- optimiser ----------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        params = list(self.parameters())
        return adamw(params, [is_decayed(p) for p in params], self.optim, self.max_steps,
                     self.initial_optimizer_state)
