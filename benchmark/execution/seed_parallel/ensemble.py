"""The batched model: K seeds of one architecture as stacked parameters, one vmapped forward, and
the group's data (seed k's own train stream in slice k of every batch)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import lightning as L
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.utils.data import DataLoader, IterableDataset

from emergence_bench.config import OptimConfig
from emergence_bench.execution.batching import vmapped
from emergence_bench.mixers.base import MixerContext
from emergence_bench.model import SequenceModel
from emergence_bench.module import (Diverged, EvalTally, check_finite, deliver_train_losses, eval_metrics,
                                    is_read_step, scored_rows, train_losses)
from emergence_bench.optim import adamw, is_decayed
from emergence_bench.tasks.base import SyntheticTask, TrainStream

if TYPE_CHECKING:
    from emergence_bench.execution.seed_parallel.seeds import Seed


class EnsembleModule(L.LightningModule):
    """K SequenceModels of one architecture as stacked parameters and one vmapped forward.

    ``stacked[i]`` is parameter ``names[i]`` of every seed, [K, *shape]. Buffers equal in every seed
    (causal masks) stay unbatched in ``template``; those that differ are stacked too. The template's
    own parameters are never read (``functional_call`` substitutes the stack) and never trained.
    ``version`` counts backward passes and optimiser steps, so a seed's view knows when it is stale.
    ``seeds`` (set by ``run_seed_parallel``) are the group's seeds, seed k in slot k.
    """

    def __init__(self, models: list[SequenceModel], task: SyntheticTask, optim: OptimConfig, max_steps: int,
                 train_on: str = "scored", log_every: int = 1):
        super().__init__()
        self.K = len(models)
        self.template = copy.deepcopy(models[0]).requires_grad_(False)
        own = [dict(m.named_parameters()) for m in models]
        self.names = list(own[0])
        self.stacked = nn.ParameterList([torch.stack([p[name].detach() for p in own]) for name in self.names])
        self.decayed = [is_decayed(own[0][name]) for name in self.names]
        buffers = [dict(m.named_buffers()) for m in models]
        self.buffer_names = [name for name in buffers[0]
                             if any(not torch.equal(b[name], buffers[0][name]) for b in buffers[1:])]
        for i, name in enumerate(self.buffer_names):
            self.register_buffer(f"seed_buffer{i}", torch.stack([b[name] for b in buffers]), persistent=False)
        self.register_buffer("rows", scored_rows(task), persistent=False)  # [N]
        self.task, self.optim, self.max_steps, self.train_on, self.log_every = task, optim, max_steps, train_on, log_every
        self.seeds: list[Seed] = []
        self._pending: list[torch.Tensor] = []  # per step not read yet: [2, K] (scored, every-row losses)
        self._pending_from = 0
        self.trained_losses: torch.Tensor | None = None  # [K], what the latest step trains on
        self.eval_for: list[Seed] | None = None  # an eval for these seeds only (SeedCallbacks sets it)
        self.version = 0
        self._train = vmap(self._seed_losses, in_dims=(0, 0, 0))
        self._eval = vmap(self._seed_logits, in_dims=(0, None, 0))

    # --- one seed's computation (vmapped over the leading dim of the stack) -------------------
    def _weights(self) -> dict[str, torch.Tensor]:
        weights = dict(zip(self.names, self.stacked))
        weights.update({name: getattr(self, f"seed_buffer{i}") for i, name in enumerate(self.buffer_names)})
        return weights

    def _seed_logits(self, weights: dict, tokens: torch.Tensor, bias: dict) -> torch.Tensor:
        """tokens [B, L+1] -> logits [B, L, V] of one seed's weights."""
        return functional_call(self.template, weights, (self.task.model_inputs(tokens), MixerContext(bias=bias)))

    def _seed_losses(self, weights: dict, tokens: torch.Tensor, bias: dict):
        """-> (scored loss, every-row loss), scalars of one seed."""
        return train_losses(self._seed_logits(weights, tokens, bias), tokens[:, 1:], self.rows, self.train_on)

    def losses(self, tokens: torch.Tensor, bias: dict[int, torch.Tensor]):
        """tokens [K, B, L+1] (seed k's batch in slice k), bias {layer: [K, ...]} -> (scored losses [K],
        every-row losses [K])."""
        with vmapped(self.device):
            return self._train(self._weights(), tokens, bias)

    def logits(self, tokens: torch.Tensor, bias: dict[int, torch.Tensor]) -> torch.Tensor:
        """tokens [B, L+1] shared by every seed -> logits [K, B, L, V]."""
        with vmapped(self.device):
            return self._eval(self._weights(), tokens, bias)

    def bias(self) -> dict[int, torch.Tensor]:
        """Each live seed's ``attention_bias``, stacked {layer: [K, ...]}."""
        return stack_bias([s.view.attention_bias if s.live else {} for s in self.seeds], self.device)

    def live(self) -> torch.Tensor:
        """[K] bool: the seeds still training."""
        return torch.tensor([s.live for s in self.seeds], device=self.device)

    def finished(self) -> list[bool]:
        """Per seed, whether it has ended: decided on the host, so a step costs no device sync."""
        return [not s.live for s in self.seeds]

    # --- training -----------------------------------------------------------------------------
    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor | None:
        """tokens [K, B, L+1] -> the sum of the live seeds' losses (their gradients are independent)."""
        scored, full = self.losses(tokens, self.bias())
        if not self._pending:
            self._pending_from = batch_idx
        self._pending.append(torch.stack([scored, full]).detach())  # [2, K]
        if is_read_step(batch_idx, self.log_every, self.max_steps):
            self.read_losses()
            for seed in [s for s in self.seeds if s.live]:
                seed.log({"train/loss": seed.view.last_train_loss,
                          "train/full_sequence_loss": seed.view.recent_full_sequence_losses[-1]}, batch_idx)
        finished = self.finished()
        if all(finished):
            self.trainer.should_stop = True
            return None  # Lightning skips the update
        self.trained_losses = full if self.train_on == "all" else scored
        if not any(finished):
            return self.trained_losses.sum()
        return torch.where(self.live(), self.trained_losses, torch.zeros_like(self.trained_losses)).sum()

    def read_losses(self) -> None:
        """EmergenceModule.read_losses for every live seed: one host sync for all of them. A seed
        whose loss became non-finite ends as ``diverged``; the others' losses go to their callbacks."""
        if not self._pending:
            return
        values, first = torch.stack(self._pending).tolist(), self._pending_from  # [n][2][K]
        self._pending = []
        steps = list(range(first, first + len(values)))
        for seed in [s for s in self.seeds if s.live]:
            k = seed.index
            losses, full_losses = [v[0][k] for v in values], [v[1][k] for v in values]
            finite = 0  # the steps before a non-finite loss count, as in a run alone
            try:
                for i, step in enumerate(steps):
                    check_finite(losses[i], full_losses[i], step)
                    finite = i + 1
            except Diverged as error:
                if finite:
                    seed.view.record_losses(losses[:finite], full_losses[:finite])
                seed.diverge(error)
                continue
            seed.view.record_losses(losses, full_losses)
            try:
                deliver_train_losses(seed.callbacks, seed.trainer, seed.view, steps, losses)
            except Exception as error:
                seed.fail(error)

    def on_train_epoch_end(self) -> None:
        self.read_losses()  # the tail of a group stopped between reads

    def backward(self, loss: torch.Tensor, *args, **kwargs) -> None:
        with vmapped(self.device):
            loss.backward(*args, **kwargs)
        if any(self.finished()):  # masked_fill, not a product: a diverged slot's 0 · NaN is NaN
            dead = ~self.live()
            for p in self.stacked:
                if p.grad is not None:
                    p.grad.masked_fill_(dead.view(-1, *[1] * (p.grad.dim() - 1)), 0.0)
        self.version += 1

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if gradient_clip_val:
            clip_per_seed_([p.grad for p in self.stacked if p.grad is not None], gradient_clip_val)

    def optimizer_step(self, *args, **kwargs) -> None:
        super().optimizer_step(*args, **kwargs)
        self.version += 1

    def optimizer_zero_grad(self, *args, **kwargs) -> None:
        super().optimizer_zero_grad(*args, **kwargs)
        self.version += 1  # a seed's view shows no gradients now, as a run alone does

    def on_validation_model_zero_grad(self) -> None:
        super().on_validation_model_zero_grad()
        self.version += 1

    def configure_optimizers(self):
        return adamw(list(self.stacked), self.decayed, self.optim, self.max_steps)

    # --- evaluation ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._tally = EvalTally(self.task, self.K, self.device)

    def validation_step(self, tokens: torch.Tensor, batch_idx: int) -> None:
        """tokens [B, L+1], the same for every seed."""
        self._tally.add(self.logits(tokens, self.bias()), tokens[:, 1:])

    def on_validation_epoch_end(self) -> None:
        for seed, result in zip(self.seeds, self._tally.results(self.global_step)):
            if seed.live and (self.eval_for is None or seed in self.eval_for):
                seed.view.last_eval = result
                seed.log(eval_metrics(result), self.global_step - 1)  # the step Lightning logs a run's eval at

    # --- one seed's weights -------------------------------------------------------------------
    @torch.no_grad()
    def copy_into(self, k: int, model: SequenceModel) -> None:
        """Write seed k's current parameters (and gradients, when there are) into ``model``, in its
        own storage, so a saved state_dict holds one seed, not the whole stack."""
        own = dict(model.named_parameters())
        for name, stacked in zip(self.names, self.stacked):
            p = own[name]
            p.copy_(stacked[k])
            p.grad = None if stacked.grad is None else stacked.grad[k].clone()


def clip_per_seed_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` on each seed's slice: grads [K, ...] each, scaled in place
    by min(1, max_norm / (‖g_k‖ + 1e-6)) with ‖g_k‖ the 2-norm over all of seed k's gradients.
    Returns the norms before clipping [K]."""
    K = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(K, -1), dim=1) for g in grads])  # [P, K]
    total = torch.linalg.vector_norm(norms, dim=0)  # [K]
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
    return total


def stack_bias(biases: list[dict[int, torch.Tensor]], device: torch.device) -> dict[int, torch.Tensor]:
    """Per-seed ``attention_bias`` dicts -> {layer: [K, ...]}; a seed without a layer's bias (a
    finished seed) gets zeros, so every seed takes the same code path."""
    layers = sorted({layer for bias in biases for layer in bias})
    stacked = {}
    for layer in layers:
        like = next(b[layer] for b in biases if layer in b)
        stacked[layer] = torch.stack([b.get(layer, torch.zeros_like(like)).to(like) for b in biases]).to(device)
    return stacked


class SeedBatches(L.LightningDataModule):
    """The group's data: train batch i is [K, B, L+1], slice k from seed k's own stream (from the
    Trainer's step on); the eval batches are the first seed's, [B, L+1] (every seed's are equal)."""

    def __init__(self, tasks: list[SyntheticTask]):
        super().__init__()
        self.tasks = tasks

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_StackedStream(self.tasks, self.trainer.global_step), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return self.tasks[0].val_dataloader()


class _StackedStream(IterableDataset):
    """Each seed's TrainStream, batch by batch, stacked: [K, B, L+1]."""

    def __init__(self, tasks: list[SyntheticTask], start: int):
        self.streams = [TrainStream(task, start) for task in tasks]

    def __iter__(self):
        for batches in zip(*self.streams):
            yield torch.stack(batches)
