"""Linear map over GF(2): x_{t+1} = A x_t mod 2, with s ones per row of A (PAPER.md, "Linear map")."""

from __future__ import annotations

import torch

from benchmark.registry import register_task
from tasks.base import SyntheticTask, check_range, seeded_generator


@register_task("linear_map")
class LinearMap(SyntheticTask):
    """Trajectories [x_0; x_1; ...; x_{T-1}] of S binary cells, flattened to S·T tokens.

    x_0 is uniform and unscored; every later cell is scored. Output cell i depends on the cells of the
    previous state where row i of A is 1. A ∈ {0,1}^{S×S} has exactly ``sparsity`` ones per row, drawn
    uniformly from ``task_seed`` once per task instance.
    """

    vocab_size = 2

    def __init__(
        self,
        state_size: int = 8,
        sparsity: int = 3,
        trajectory_length: int = 2,
        task_seed: int = 0,
        batch_size: int = 128,
    ):
        check_range("state_size", state_size, 1)
        check_range("sparsity", sparsity, 1, state_size)
        check_range("trajectory_length", trajectory_length, 2)
        super().__init__(batch_size, task_seed)
        self.state_size = S = state_size
        self.sparsity = sparsity
        self.trajectory_length = T = trajectory_length
        self.seq_len = S * T - 1
        g = seeded_generator(task_seed, "linear_map.A", S, sparsity)
        columns = torch.rand(S, S, generator=g).argsort(dim=1)[:, :sparsity]
        self.A = torch.zeros(S, S, dtype=torch.long).scatter_(1, columns, 1)

    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        state = torch.randint(0, 2, (batch_size, self.state_size), generator=generator)
        states = [state]
        for _ in range(self.trajectory_length - 1):
            state = (state @ self.A.T) % 2
            states.append(state)
        return torch.cat(states, dim=1)

    @property
    def loss_mask(self) -> torch.Tensor:
        # Row p predicts token p + 1; tokens S.. (states 1..T-1) are scored.
        return torch.arange(self.seq_len) >= self.state_size - 1

    @property
    def output_cell(self) -> torch.Tensor:
        cell = (torch.arange(self.seq_len) + 1) % self.state_size
        return torch.where(self.loss_mask, cell, -1)

    def ground_truth_attention(self) -> torch.Tensor:
        S = self.state_size
        pattern = torch.zeros(self.seq_len, self.seq_len, dtype=torch.long)
        for t in range(1, self.trajectory_length):
            rows = t * S - 1 + torch.arange(S)  # rows predicting state t's cells
            pattern[rows, (t - 1) * S : t * S] = self.A
        return pattern
