"""In-context linear map: x_{t+1} = A x_t mod 2 with a fresh A in every sequence.

The linear map of PAPER.md stores one A in the weights; here each sequence draws its own A (exactly
``sparsity`` ones per row, uniform) and shows it only through its trajectory of T ≥ 3 states, so the
model has to infer the pattern in context, as in cellular_automata, before it can predict.

Ground truth: cell i of x_{t+1} depends on the cells of x_t where row i of the sequence's A is 1. A
varies per sequence and cannot be read back from the tokens, so:

    ground_truth_attention()      [L, L]     the union over every A: the whole previous state on each
                                             scored row (identical to the per-sequence pattern when
                                             sparsity = state_size)
    generate_with_maps(g, B)      tokens [B, S·T], A [B, S, S]
    generate_with_truth(g, B)     tokens [B, S·T], truth [B, L, L]  (each sequence's own pattern)
    batch_with_truth(split, i)    the same for batch(split, i)

Loss: every cell of x_1..x_{T-1} is scored, as in cellular_automata. ``floor_loss`` stays 0, a lower
bound: x_1 is near chance (A is unknown when it is predicted), and a later state is predictable only
once the transitions seen so far pin each row of A down. Past about S transitions it always is, since
x_t then lies in the span of the earlier states. The Bayes-optimal loss, by enumerating the rows of A
consistent with each prefix (S=8, s=3), is 0.48 nats at T=8 (accuracy 0.69) and 0.22 at T=16
(accuracy 0.86; states 8..15 are exact), hence the default T = 16.
"""

from __future__ import annotations

import torch

from benchmark.registry import register_task
from tasks.base import StateTrajectoryTask, check_range


@register_task("in_context_linear_map")
class InContextLinearMap(StateTrajectoryTask):
    """Trajectories [x_0; ...; x_{T-1}] of S binary cells, flattened to S·T tokens, A drawn per sequence.

        A       [B, S, S] long   ``sparsity`` ones per row, uniform, from the batch's generator
        tokens  [B, S·T] long    x_0 uniform (unscored), x_{t+1} = A x_t mod 2
    """

    vocab_size = 2
    per_sequence_truth = True  # ground_truth_attention() is an envelope; see generate_with_truth

    def __init__(
        self,
        state_size: int = 8,
        sparsity: int = 3,
        trajectory_length: int = 16,
        task_seed: int = 0,
        batch_size: int = 128,
    ):
        check_range("state_size", state_size, 1)
        check_range("sparsity", sparsity, 1, state_size)
        # One transition shows A but leaves nothing to predict with it: at least two are needed.
        check_range("trajectory_length", trajectory_length, 3)
        super().__init__(state_size, trajectory_length, batch_size, task_seed)
        self.sparsity = sparsity

    def generate_with_maps(self, generator: torch.Generator, batch_size: int):
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

    def generate_with_truth(self, generator: torch.Generator, batch_size: int):
        """(tokens [B, S·T] long, truth [B, seq_len, seq_len] long): ``generate``'s tokens for the
        same generator state, and each sequence's own ground-truth pattern."""
        tokens, A = self.generate_with_maps(generator, batch_size)
        return tokens, self.attention_from_maps(A)


    def source_cells(self) -> torch.Tensor:
        """[S, S] all ones: the union of every A's support (any previous cell can be a source)."""
        return torch.ones(self.state_size, self.state_size, dtype=torch.long)
