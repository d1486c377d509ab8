"""Linear map over GF(2): x_{t+1} = A x_t mod 2, with s ones per row of A (docs/science.md, "Linear map").

The shortcut through earlier outputs: x1 is scored token by token, so a model predicting cell i of x1
has already read x1[0..i−1]. With x0 uniform, x1[i] is a function of x1[<i] alone exactly when row
A_i is in the GF(2) span of A_0..A_{i−1}; otherwise x1[i] is uniform given x1[<i]. Such cells can be
learned without the sparse pattern onto x0 (``shortcut_cells``, ``shortcut_loss``). The option
``blank_outputs`` removes the shortcut: the model reads a blank token in place of every x1 token (the
targets stay the true bits), so every x1 cell must be predicted from x0.
"""

from __future__ import annotations

import math

import torch

from emergence_bench.registry import register_task
from emergence_bench.tasks.base import StateTrajectoryTask, check_range, seeded_generator

BLANK = 2  # the input token that replaces x1's tokens under blank_outputs; never a target


def in_span_of_earlier_rows(rows: torch.Tensor) -> torch.Tensor:
    """rows [S, S] 0/1 -> [S] bool: whether row i is a GF(2) combination of rows 0..i−1 (a zero
    row is the empty combination). Gaussian elimination on rows as bit masks."""
    basis: dict[int, int] = {}  # leading bit -> a reduced row with that leading bit
    found = []
    for row in rows.tolist():
        v = int("".join(str(int(b)) for b in row), 2)
        while v and (v.bit_length() - 1) in basis:
            v ^= basis[v.bit_length() - 1]  # clears the leading bit, lower ones may appear
        if v:
            basis[v.bit_length() - 1] = v
        found.append(v == 0)
    return torch.tensor(found, dtype=torch.bool)


@register_task("linear_map")
class LinearMap(StateTrajectoryTask):
    """Trajectories [x_0; x_1; ...; x_{T-1}] of S binary cells, flattened to S·T tokens.

    x_0 is uniform and unscored; every later cell is scored. Output cell i depends on the cells of the
    previous state where row i of A is 1. A ∈ {0,1}^{S×S} has exactly ``sparsity`` ones per row, drawn
    uniformly from ``task_seed`` once per task instance, or given as ``matrix`` (S rows of S 0/1
    entries, ``sparsity`` ones each), e.g. another implementation's A, to compare on the same task.

    ``blank_outputs=True`` (only with trajectory_length 2): ``model_inputs`` replaces the input
    tokens of x1 with BLANK (vocab_size 3); targets, loss mask and patterns are unchanged.
    """

    vocab_size = 2

    def __init__(
        self,
        state_size: int = 8,
        sparsity: int = 3,
        trajectory_length: int = 2,
        task_seed: int = 0,
        batch_size: int = 128,
        blank_outputs: bool = False,
        matrix: list | None = None,
    ) -> None:
        check_range("state_size", state_size, 1)
        check_range("sparsity", sparsity, 1, state_size)
        if blank_outputs and trajectory_length != 2:
            # Blanking x1 would also hide the inputs that determine x2.
            raise ValueError(f"trajectory_length must be 2 with blank_outputs=True (x1 is blanked and "
                             f"predicted from x0 alone), got trajectory_length={trajectory_length}")
        super().__init__(state_size, trajectory_length, batch_size, task_seed)
        self.sparsity = sparsity
        self.blank_outputs = bool(blank_outputs)
        self.vocab_size = 3 if self.blank_outputs else 2
        if matrix is None:
            g = seeded_generator(task_seed, "linear_map.A", state_size, sparsity)
            columns = torch.rand(state_size, state_size, generator=g).argsort(dim=1)[:, :sparsity]
            self.A = torch.zeros(state_size, state_size, dtype=torch.long).scatter_(1, columns, 1)
        else:
            self.A = self._check_matrix(matrix, state_size, sparsity)

    @staticmethod
    def _check_matrix(matrix: list, state_size: int, sparsity: int) -> torch.Tensor:
        try:
            A = torch.tensor(matrix, dtype=torch.long)
        except (TypeError, ValueError):
            A = None
        if A is None or A.shape != (state_size, state_size) or not torch.all((A == 0) | (A == 1)):
            raise ValueError(f"matrix must be {state_size} rows of {state_size} entries 0 or 1 "
                             f"(state_size={state_size}), got {matrix!r}")
        if not torch.all(A.sum(1) == sparsity):
            raise ValueError(f"matrix must have sparsity={sparsity} ones in every row, got rows with "
                             f"{sorted(set(A.sum(1).tolist()))}")
        return A

    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        state = torch.randint(0, 2, (batch_size, self.state_size), generator=generator)
        states = [state]
        for _ in range(self.trajectory_length - 1):
            state = (state @ self.A.T) % 2
            states.append(state)
        return torch.cat(states, dim=1)

    def source_cells(self) -> torch.Tensor:
        return self.A

    def model_inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, 2S] -> [B, 2S − 1]; under blank_outputs the inputs S.. (x1) are BLANK."""
        inputs = tokens[:, :-1]
        if not self.blank_outputs:
            return inputs
        S = self.state_size  # out of place, so it also runs under vmap (seed-parallel)
        return torch.cat([inputs[:, :S], torch.full_like(inputs[:, S:], BLANK)], dim=1)

    @property
    def chance_loss(self) -> float:
        """ln 2: the targets are bits (the blank is an input only)."""
        return math.log(2)

    def shortcut_cells(self, state: int = 1) -> torch.Tensor:
        """[S] bool: cells of state ``state`` (1..T−1) that are a function of the earlier cells of
        the same state alone. x_t = A^t x_0 with x_0 uniform, so cell i is one exactly when row i of
        A^t (mod 2) is in the GF(2) span of rows 0..i−1; otherwise it is uniform given them. For
        t = 1 these are the rows of A. The same A acts at every step, but for t ≥ 2 the test runs on
        A^t, whose row dependencies include A's: a later state has at least state 1's shortcut
        cells (more when A is singular). All False under blank_outputs (x1 is never read)."""
        check_range("state", state, 1, self.trajectory_length - 1)
        if self.blank_outputs:
            return torch.zeros(self.state_size, dtype=torch.bool)
        power = torch.eye(self.state_size, dtype=torch.long)
        for _ in range(state):
            power = (self.A @ power) % 2
        return in_span_of_earlier_rows(power)

    @property
    def shortcut_loss(self) -> float:
        """The loss a model reaches by learning only the shortcut cells: each other cell costs ln 2,
        averaged over the scored states 1..T−1 (T = 2: (non-shortcut cells / S)·ln 2)."""
        states = range(1, self.trajectory_length)
        hard = sum(int((~self.shortcut_cells(t)).sum()) for t in states)
        return hard / (self.state_size * len(states)) * math.log(2)
