"""Linear map over GF(2): x_{t+1} = A x_t mod 2, with s ones per row of A (PAPER.md, "Linear map")."""

from __future__ import annotations

import torch

from benchmark.registry import register_task
from tasks.base import StateTrajectoryTask, check_range, seeded_generator


@register_task("linear_map")
class LinearMap(StateTrajectoryTask):
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
        super().__init__(state_size, trajectory_length, batch_size, task_seed)
        self.sparsity = sparsity
        g = seeded_generator(task_seed, "linear_map.A", state_size, sparsity)
        columns = torch.rand(state_size, state_size, generator=g).argsort(dim=1)[:, :sparsity]
        self.A = torch.zeros(state_size, state_size, dtype=torch.long).scatter_(1, columns, 1)

    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        state = torch.randint(0, 2, (batch_size, self.state_size), generator=generator)
        states = [state]
        for _ in range(self.trajectory_length - 1):
            state = (state @ self.A.T) % 2
            states.append(state)
        return torch.cat(states, dim=1)

    def source_cells(self) -> torch.Tensor:
        return self.A
