"""Dyck-k: balanced strings of k bracket types, for next-token prediction (pre-pre-training, PAPER.md 8).

Tokens: opener of type j is ``j``, its closer is ``k + j`` (vocabulary 2k). A sequence of ``length``
tokens is a random walk on the nesting depth that starts and ends at depth 0 and never exceeds
``max_depth``: while depth 0 it opens; at ``max_depth``, or when the remaining tokens are just enough
to close every open bracket, it closes; otherwise it opens with probability ``open_prob``. An opener's
type is uniform; a closer's type is forced (it matches the top of the stack). So a sequence is a
concatenation of balanced Dyck strings that fills the length exactly, and is itself balanced.

What is scored: every row (``loss_mask`` all True). An opener's type and the open/close decision are
random, so the loss floor is positive: ``floor_loss`` is the exact entropy of the generating process
per token, and ``max_accuracy`` the best greedy accuracy, both computed by dynamic programming over the
depth. Only a closer is fully predictable, and only it has a true source.

Ground truth: the row that predicts a closer (row i-1 for the closer at token i) marks the key of its
matching opener. Which token is a closer, and where its opener sits, changes from sequence to sequence,
so the pattern is per sequence: ``ground_truth_for(tokens)`` [B, L, L] (a stack matcher).
``ground_truth_attention()`` [L, L] is the union of the per-sequence patterns over every sequence the
generator can produce (its envelope).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from emergence_bench.registry import register_task
from emergence_bench.tasks.base import SyntheticTask, check_range

# Output cells are position buckets: every row is scored, so rows are grouped into at most this many
# equal spans (mqar allows 64 because each of its cells is one query, not an arbitrary bucket).
POSITION_SPANS = 16


@register_task("dyck")
class Dyck(SyntheticTask):
    """Balanced bracket sequences of ``length`` tokens (seq_len = length - 1).

        tokens   [B, length] long   openers 0..k-1, closers k..2k-1, balanced, depth ≤ max_depth
        cells    positions grouped into ≤ POSITION_SPANS equal spans (row p -> cell p·n // seq_len)
    """

    per_sequence_truth = True  # ground_truth_attention() is an envelope; see ground_truth_for

    def __init__(
        self,
        bracket_types: int = 4,
        max_depth: int = 8,
        length: int = 64,
        open_prob: float = 0.5,
        task_seed: int = 0,
        batch_size: int = 64,
    ):
        check_range("bracket_types", bracket_types, 1)
        check_range("max_depth", max_depth, 1)
        check_range("length", length, 2)
        if length % 2:
            raise ValueError(f"length must be even and in [2, inf] (a balanced string), got {length}")
        # 0 or 1 would make the open/close pattern deterministic, and the envelope below assumes both
        # choices happen with positive probability.
        if not 0 < open_prob < 1:
            raise ValueError(f"open_prob must be in (0, 1), got {open_prob}")
        super().__init__(batch_size, task_seed)
        self.bracket_types, self.max_depth, self.length = bracket_types, max_depth, length
        self.open_prob = float(open_prob)
        self.vocab_size = 2 * bracket_types
        self.seq_len = length - 1
        self._floor, self._max_accuracy = self._process_statistics()

    # --- generation ---------------------------------------------------------------------------
    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        k, n = self.bracket_types, self.length
        opener = (torch.rand(batch_size, n, generator=generator) < self.open_prob).numpy()  # [B, n] coins
        types = torch.randint(0, k, (batch_size, n), generator=generator).numpy()  # [B, n] opener types
        # The walk position by position, over the batch at once, in numpy: the same draws and steps
        # as torch ops would take, at a fifth of the per-op cost (a batch is generated every step).
        depth = np.zeros(batch_size, dtype=np.int64)
        stack = np.zeros((batch_size, min(self.max_depth, n // 2) + 1), dtype=np.int64)  # open types
        rows = np.arange(batch_size)
        tokens = np.empty((batch_size, n), dtype=np.int64)
        for i in range(n):
            remaining = n - i  # tokens left, this one included
            # Opening must leave enough tokens to close everything: depth + 1 ≤ remaining - 1.
            can_open = (depth < self.max_depth) & (depth + 2 <= remaining)
            can_close = depth > 0
            opens = can_open & (~can_close | opener[:, i])
            tokens[:, i] = np.where(opens, types[:, i], k + stack[rows, np.maximum(depth - 1, 0)])
            slot = np.minimum(depth, stack.shape[1] - 1)
            stack[rows, slot] = np.where(opens, types[:, i], stack[rows, slot])
            depth += np.where(opens, 1, -1)
        return torch.from_numpy(tokens)

    def ground_truth_for(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, length] (balanced) -> [B, seq_len, seq_len] long 0/1: row i-1 marks the
        matching opener's position for every closer at token i; other rows are zero."""
        B, n = tokens.shape
        rows = torch.arange(B)
        positions = torch.zeros(B, n // 2 + 1, dtype=torch.long)  # stack of open positions
        depth = torch.zeros(B, dtype=torch.long)
        truth = torch.zeros(B, n - 1, n - 1, dtype=torch.long)
        for i in range(n):
            closes = tokens[:, i] >= self.bracket_types
            if i > 0:
                opener = positions[rows, (depth - 1).clamp_min(0)]
                truth[rows[closes], i - 1, opener[closes]] = 1
            positions[rows, depth.clamp(0, n // 2)] = torch.where(
                closes, positions[rows, depth.clamp(0, n // 2)], i)
            depth = depth + torch.where(closes, -1, 1)
        return truth

    # --- positions ----------------------------------------------------------------------------
    @property
    def loss_mask(self) -> torch.Tensor:
        return torch.ones(self.seq_len, dtype=torch.bool)

    @property
    def output_cell(self) -> torch.Tensor:
        cells = min(self.seq_len, POSITION_SPANS)
        return torch.arange(self.seq_len) * cells // self.seq_len

    def ground_truth_attention(self) -> torch.Tensor:
        """[seq_len, seq_len] 0/1 envelope: row i-1 marks key j when some sequence the generator can
        produce has a closer at i matching an opener at j.

        Such a pair needs: i - j odd; the opener at j opens from depth d ≥ j mod 2 (depth parity
        equals position parity), so d + 1 ≤ max_depth; and a non-empty span between them nests one
        deeper, d + 2 ≤ max_depth. Both are easiest at d = j mod 2, so that d decides. (The d brackets
        still open after i always close in time: d = 1 needs i even, so i < length - 1.)"""
        n = self.length
        i = torch.arange(1, n)[:, None]  # [L, 1] closer position (row i - 1)
        j = torch.arange(n - 1)[None, :]  # [1, L] opener position
        d = j % 2
        feasible = (j < i) & ((i - j) % 2 == 1) & (d + 1 <= self.max_depth)
        feasible &= (i - j == 1) | (d + 2 <= self.max_depth)
        return feasible.long()

    # --- losses -------------------------------------------------------------------------------
    @property
    def floor_loss(self) -> float:
        """Mean over scored rows of the entropy (nats) of the next token given the prefix."""
        return self._floor

    @property
    def max_accuracy(self) -> float:
        """The best expected greedy accuracy over scored rows (a closer is certain, an opener is not)."""
        return self._max_accuracy

    def _process_statistics(self) -> tuple[float, float]:
        """(floor_loss, max_accuracy) by propagating the depth distribution token by token."""
        k, p, n, D = self.bracket_types, self.open_prob, self.length, self.max_depth
        # The next token's entropy and top probability in each situation: forced open (uniform type),
        # forced close (certain), free (open w.p. p with a uniform type, else the known closer).
        free_entropy = -(1 - p) * math.log(1 - p) - p * math.log(p / k)
        cases = {"open": (math.log(k), 1 / k), "close": (0.0, 1.0), "free": (free_entropy, max(1 - p, p / k))}
        top = min(D, n // 2)
        prob = [1.0] + [0.0] * top  # prob[d]: probability of depth d before token i
        entropy = accuracy = 0.0
        for i in range(n):
            remaining = n - i
            nxt = [0.0] * (top + 1)
            for d, q in enumerate(prob):
                if q == 0.0:
                    continue
                can_open = d < D and d + 2 <= remaining
                case = "free" if can_open and d > 0 else ("open" if can_open else "close")
                if i > 0:  # token 0 is the input, not a prediction
                    entropy += q * cases[case][0]
                    accuracy += q * cases[case][1]
                if case == "open":
                    nxt[d + 1] += q
                elif case == "close":
                    nxt[d - 1] += q
                else:
                    nxt[d + 1] += q * p
                    nxt[d - 1] += q * (1 - p)
            prob = nxt
        return entropy / self.seq_len, accuracy / self.seq_len
