"""Induction heads on repeated random tokens: the classic small-scale task of an abrupt transition
(Olsson et al. 2022; Reddy 2023; Singh et al. 2024), with the repeat at a random offset.

A sequence is a prefix of ``length`` n distinct tokens, a uniform draw without replacement from the
``vocab_size`` V tokens, then a ``window`` of m consecutive prefix tokens starting at a random
position r (uniform in [0, n − m], per sequence):

    A_0 A_1 ... A_{n-1} | A_r A_{r+1} ... A_{r+m-1}                               (n + m tokens)

Row p holds token p and predicts token p + 1. Only the window's predictable tokens are scored: rows
n .. n + m − 2, row n + j holding A_{r+j} and predicting A_{r+j+1}, the token at prefix position
r + j + 1: the token after the previous (only: the prefix's tokens are distinct) occurrence of the
current token. Row n − 1 (predicting A_r) is not scored: r is random, so its target is a uniform
draw among the first n − m + 1 prefix tokens.

Why a random offset: with the repeat at a fixed offset (the whole prefix copied, or m = n here, where
r = 0 always) row p's target sits at the fixed key p − n + 1, and a model attends there by position
alone (learnt absolute position embeddings), no content match and no induction head: in a calibration
run a 2-layer Transformer solved that form in 50-125 steps with no plateau. With r random, which
prefix position holds the target is known only by matching the current token against the prefix.
Hence ``window`` ≤ length − 1.

Ground truth (the induction pattern, per sequence: it moves with r): row n + j marks key r + j + 1.
``ground_truth_for(tokens)`` finds r as the prefix position of token n (unique: distinct tokens);
``ground_truth_attention()`` is the envelope, the union over r: row n + j marks keys
j + 1 .. j + 1 + (n − m).

Facts (nats on the scored tokens):

    chance_loss    ln V: a uniform guess over the vocabulary.
    floor_loss     0 and max_accuracy 1: the target is determined by the sequence.
    shortcut_loss  the best of three predictors with no content lookup (no token-dependent pattern:
                   uniform attention over fixed position ranges, and bag arithmetic on the tokens
                   found there), each exact, the target uniform over a candidate set of distinct
                   tokens that always holds it, so the loss is ln(set size):
                   positional      row n + j attends uniformly to prefix positions j + 1 .. j + 1 +
                                   (n − m), where the target lies whatever r:
                                   ln(n − m + 1).
                   bag             the prefix's tokens minus the window's so far (A_r .. A_{r+j}):
                                   n − j − 1 left, mean over j = 0 .. m − 2 of ln(n − j − 1).
                   positional_bag  both: the positional candidates minus the window's tokens so far.
                                   Those sit at prefix positions r .. r + j, of which min(r, j + 1)
                                   are candidates (j + 1 .. r + j, or all j + 1 of them once
                                   r ≥ j + 1), leaving n − m + 1 − min(r, j + 1): the mean over j and
                                   the uniform r of ln(n − m + 1 − min(r, j + 1)). Its set lies inside
                                   each of the other two, so it is the smallest (at the defaults
                                   V = 64, n = 16, m = 8: positional ln 9 = 2.20, bag 2.47,
                                   positional_bag 1.79; chance 4.16).
                   A reference, not a bound on every dense mechanism: with many fixed-range heads and
                   an MLP that reads r off their overlaps with the window, dense attention can in
                   principle go lower, at the price of one head per candidate position.

Batches are drawn from the (task seed, data seed, split, batch index) generator alone; the task has
no instance of its own to draw.
"""

from __future__ import annotations

import math

import torch

from emergence_bench.registry import register_task
from emergence_bench.tasks.base import SyntheticTask, check_range

# One output cell per scored position, up to the per-cell logging limit
# (emergence_bench.engine.module.MAX_LOGGED_CELLS, 64); longer windows share cells (as mqar's queries).
MAX_POSITION_CELLS = 64


@register_task("induction")
class Induction(SyntheticTask):
    """A prefix of ``length`` distinct tokens, then a ``window`` of it from a random start r,
    length + window tokens (seq_len one less).

        tokens   [B, n + m] long   prefix distinct in [0, V); tokens[:, n:] == prefix[:, r : r + m]
        scored   rows n .. n + m − 2 (the window's tokens after its first)
        truth    row n + j marks key r + j + 1, per sequence (ground_truth_for); the envelope marks
                 keys j + 1 .. j + 1 + (n − m)
        cells    scored row n + j -> cell j (bucketed into ≤ MAX_POSITION_CELLS cells beyond that many)
    """

    per_sequence_truth = True  # ground_truth_attention() is an envelope; see ground_truth_for

    def __init__(
        self,
        vocab_size: int = 64,
        length: int = 16,
        window: int = 8,
        task_seed: int = 0,
        batch_size: int = 64,
    ) -> None:
        try:
            check_range("length", length, 3)
        except ValueError as error:
            raise ValueError(f"{error} (the window needs 2 ≤ window ≤ length − 1)") from None
        try:
            check_range("window", window, 2, length - 1)
        except ValueError as error:
            raise ValueError(f"{error} (a window of one token leaves no scored row; window = length "
                             f"always repeats the whole prefix from its start, a fixed offset that "
                             f"position alone solves with no induction head)") from None
        try:
            check_range("vocab_size", vocab_size, length)
        except ValueError as error:
            raise ValueError(f"{error} (the prefix is {length} distinct tokens)") from None
        super().__init__(batch_size, task_seed)
        self.vocab_size, self.length, self.window = vocab_size, length, window
        self.seq_len = length + window - 1

    # --- generation ---------------------------------------------------------------------------
    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        """[batch_size, n + m] long: a prefix of n distinct tokens, then prefix[r : r + m], r uniform
        in [0, n − m] per sequence."""
        n, m = self.length, self.window
        prefix = torch.rand(batch_size, self.vocab_size, generator=generator).argsort(dim=1)[:, :n]
        start = torch.randint(0, n - m + 1, (batch_size, 1), generator=generator)
        return torch.cat([prefix, prefix.gather(1, start + torch.arange(m))], dim=1)

    def ground_truth_for(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, n + m] -> [B, seq_len, seq_len] long 0/1: row n + j marks key r + j + 1, r the
        prefix position of the window's first token (found by content: it occurs once in the prefix)."""
        n, B = self.length, tokens.shape[0]
        start = (tokens[:, :n] == tokens[:, n : n + 1]).long().argmax(dim=1)  # [B]
        truth = torch.zeros(B, self.seq_len, self.seq_len, dtype=torch.long)
        j = torch.arange(self.window - 1)
        truth[torch.arange(B)[:, None], self.scored_rows, start[:, None] + j + 1] = 1
        return truth

    # --- positions ----------------------------------------------------------------------------
    @property
    def scored_rows(self) -> torch.Tensor:
        """[m − 1] long: rows n .. n + m − 2, each holding a window token and predicting the next one."""
        return torch.arange(self.length, self.seq_len)

    @property
    def loss_mask(self) -> torch.Tensor:
        return torch.arange(self.seq_len) >= self.length

    @property
    def output_cell(self) -> torch.Tensor:
        cells = torch.full((self.seq_len,), -1, dtype=torch.long)
        scored = self.window - 1
        n = min(scored, MAX_POSITION_CELLS)
        cells[self.scored_rows] = torch.arange(scored) * n // scored
        return cells

    def ground_truth_attention(self) -> torch.Tensor:
        """[seq_len, seq_len] 0/1 envelope, the union of the per-sequence patterns over r: row n + j
        marks keys j + 1 .. j + 1 + (n − m), the prefix positions that may hold its target."""
        pattern = torch.zeros(self.seq_len, self.seq_len, dtype=torch.long)
        j = torch.arange(self.window - 1)[:, None]
        pattern[self.scored_rows[:, None], j + 1 + torch.arange(self.length - self.window + 1)] = 1
        return pattern

    def probe_keys(self) -> torch.Tensor:
        """Scored rows: the n prefix positions (where the token to copy sits)."""
        keys = torch.zeros(self.seq_len, self.seq_len, dtype=torch.bool)
        keys[self.scored_rows, : self.length] = True
        return keys

    # --- facts --------------------------------------------------------------------------------
    @property
    def chance_loss(self) -> float:
        """ln V: a uniform guess over the vocabulary."""
        return math.log(self.vocab_size)

    @property
    def positional_loss(self) -> float:
        """ln(n − m + 1): uniform over the tokens at the prefix positions the target may occupy
        (row n + j: j + 1 .. j + 1 + (n − m)), a position-fixed pattern (module docstring)."""
        return math.log(self.length - self.window + 1)

    @property
    def bag_loss(self) -> float:
        """The mean over j = 0 .. m − 2 of ln(n − j − 1): uniform over the prefix's tokens not yet in
        the window (module docstring)."""
        terms = [math.log(self.length - j - 1) for j in range(self.window - 1)]
        return sum(terms) / len(terms)

    @property
    def positional_bag_loss(self) -> float:
        """The mean over j = 0 .. m − 2 and r uniform in [0, n − m] of ln(n − m + 1 − min(r, j + 1)):
        the positional candidates minus the window's tokens so far (module docstring)."""
        k = self.length - self.window + 1  # candidates per row, and values of r
        terms = [math.log(k - min(r, j + 1)) for j in range(self.window - 1) for r in range(k)]
        return sum(terms) / len(terms)

    @property
    def shortcut_loss(self) -> float:
        """The best of the three predictors with no content lookup (module docstring):
        min(positional_loss, bag_loss, positional_bag_loss), always positional_bag_loss."""
        return min(self.positional_loss, self.bag_loss, self.positional_bag_loss)
