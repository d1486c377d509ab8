"""In-context linear map: x_{t+1} = A x_t mod 2 with a fresh A in every sequence.

The linear map of docs/science.md stores one A in the weights; here each sequence draws its own A (exactly
``sparsity`` ones per row, uniform) and shows it only through its trajectory of T ≥ 3 states, so the
model has to infer the pattern in context, as in cellular_automata, before it can predict.

Ground truth: cell i of x_{t+1} depends on the cells of x_t where row i of the sequence's A is 1. A
varies per sequence and cannot be read back from the tokens, so:

    ground_truth_attention()      [L, L]     the union over every A: the whole previous state on each
                                             scored row (identical to the per-sequence pattern when
                                             sparsity = state_size)
    generate_with_maps(g, B)      tokens [B, S·T], A [B, S, S]
    attention_from_maps(A)        truth [B, L, L]  (each sequence's own pattern)

Loss: every cell of x_1..x_{T-1} is scored, as in cellular_automata. x_1 is near chance (A is
unknown when it is predicted), and a later state is predictable only once the transitions seen so far
pin each row of A down; past about S transitions it always is, since x_t then lies in the span of the
earlier states. ``floor_loss`` and ``max_accuracy`` are the Bayes-optimal loss and greedy accuracy,
from enumerating the rows of A consistent with each prefix (``bayes_oracle``) on fixed sequences:
at S=8, s=3 about 0.48 nats and 0.69 at T=8, 0.22 and 0.86 at T=16, hence the default T = 16.
Above MAX_CANDIDATES candidate rows (C(S, s)) the enumeration is skipped: then ``floor_loss`` is 0 and
``max_accuracy`` 1, bounds only.
"""

from __future__ import annotations

import itertools
import math
from functools import cached_property

import torch

from emergence_bench.registry import register_task
from emergence_bench.tasks.base import StateTrajectoryTask, check_range, seeded_generator

MAX_CANDIDATES = 2_000  # C(S, s) rows of A beyond which the Bayes oracle is not run (~5 s at 1,820)
ORACLE_SEQUENCES = 256


@register_task("in_context_linear_map")
class InContextLinearMap(StateTrajectoryTask):
    """Trajectories [x_0; ...; x_{T-1}] of S binary cells, flattened to S·T tokens, A drawn per sequence.

        A       [B, S, S] long   ``sparsity`` ones per row, uniform, from the batch's generator
        tokens  [B, S·T] long    x_0 uniform (unscored), x_{t+1} = A x_t mod 2
    """

    vocab_size = 2
    per_sequence_truth = True  # ground_truth_attention() is an envelope; see attention_from_maps

    def __init__(
        self,
        state_size: int = 8,
        sparsity: int = 3,
        trajectory_length: int = 16,
        task_seed: int = 0,
        batch_size: int = 128,
    ) -> None:
        check_range("state_size", state_size, 1)
        check_range("sparsity", sparsity, 1, state_size)
        # One transition shows A but leaves nothing to predict with it: at least two are needed.
        check_range("trajectory_length", trajectory_length, 3)
        super().__init__(state_size, trajectory_length, batch_size, task_seed)
        self.sparsity = sparsity

    def generate_with_maps(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [B, S·T] long, A [B, S, S] long): the trajectories and each sequence's map."""
        S = self.state_size
        columns = torch.rand(batch_size, S, S, generator=generator).argsort(dim=2)[..., : self.sparsity]
        A = torch.zeros(batch_size, S, S, dtype=torch.long).scatter_(2, columns, 1)
        state = torch.randint(0, 2, (batch_size, S), generator=generator)
        states = [state]
        for _ in range(self.trajectory_length - 1):
            state = torch.einsum("bij,bj->bi", A, state) % 2
            states.append(state)
        return torch.cat(states, dim=1), A

    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        return self.generate_with_maps(generator, batch_size)[0]

    def attention_from_maps(self, A: torch.Tensor) -> torch.Tensor:
        """A [B, S, S] -> [B, seq_len, seq_len] long: each A placed, as source_cells is by
        ground_truth_attention, on the rows predicting every state t ≥ 1 and the keys of state t - 1."""
        S, B = self.state_size, A.shape[0]
        truth = torch.zeros(B, self.seq_len, self.seq_len, dtype=torch.long)
        for t in range(1, self.trajectory_length):
            truth[:, t * S - 1 : (t + 1) * S - 1, (t - 1) * S : t * S] = A
        return truth

    def bayes_oracle(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, S·T] -> (p of the true token, p of the likelier bit), each [B, S·(T−1)] float64.

        Row i of A is uniform over the C(S, s) candidate rows with s ones, independently of the other
        rows, and only cell i's transitions inform it; so per (sequence, cell) the posterior is uniform
        over the candidates consistent with every transition of that cell seen so far."""
        S, T = self.state_size, self.trajectory_length
        rows = torch.zeros(math.comb(S, self.sparsity), S, dtype=torch.long)  # [R, S]
        for r, columns in enumerate(itertools.combinations(range(S), self.sparsity)):
            rows[r, list(columns)] = 1
        states = tokens.view(-1, T, S)
        consistent = torch.ones(states.shape[0], S, rows.shape[0], dtype=torch.bool)  # [B, S, R]
        p_true, p_max = [], []
        for t in range(T - 1):
            parity = (states[:, t] @ rows.T) % 2  # [B, R]: each candidate's next bit
            ones = (consistent & parity[:, None, :].bool()).sum(-1).double()  # [B, S]
            p_one = ones / consistent.sum(-1).double()
            target = states[:, t + 1]  # [B, S]
            p_true.append(torch.where(target == 1, p_one, 1 - p_one))
            p_max.append(torch.maximum(p_one, 1 - p_one))
            consistent &= parity[:, None, :] == target[:, :, None]
        return torch.cat(p_true, dim=1), torch.cat(p_max, dim=1)

    @cached_property
    def _bayes(self) -> tuple[float, float]:
        """(floor_loss, max_accuracy) on fixed sequences of the task seed; (0, 1) beyond MAX_CANDIDATES."""
        if math.comb(self.state_size, self.sparsity) > MAX_CANDIDATES:
            return 0.0, 1.0
        tokens = self.generate(seeded_generator(self.task_seed, "oracle", ORACLE_SEQUENCES), ORACLE_SEQUENCES)
        p_true, p_max = self.bayes_oracle(tokens)
        return float(-p_true.log().mean()), float(p_max.mean())

    @property
    def floor_loss(self) -> float:
        return self._bayes[0]

    @property
    def max_accuracy(self) -> float:
        return self._bayes[1]

    def source_cells(self) -> torch.Tensor:
        """[S, S] all ones: the union of every A's support (any previous cell can be a source)."""
        return torch.ones(self.state_size, self.state_size, dtype=torch.long)
