"""Induction heads on repeated random tokens: the classic small-scale task of an abrupt transition
(Olsson et al. 2022; Reddy 2023; Singh et al. 2024).

A sequence is a random prefix of ``length`` tokens drawn uniformly, with replacement, from the
``vocab_size`` tokens, then the same prefix once more:

    x_0 x_1 ... x_{n-1} | x_0 x_1 ... x_{n-1}                                    (2n tokens, n = length)

so token p of the second copy (p ≥ n) is x_{p-n}. Row p holds token p and predicts token p + 1. Only
the second copy's predictable tokens are scored: rows n .. 2n − 2, each holding x_{p-n} and predicting
x_{p+1-n}. Row n − 1 (the last token of the first copy, predicting x_0 again) is not scored: nothing
before it says that the prefix is about to repeat, so its target is a uniform draw.

Ground truth (the induction pattern): row p marks key p − n + 1, the token after the previous
occurrence of the current token, which holds the target. It is the same for every sequence, so
``ground_truth_attention()`` is exact and there is no per-sequence truth. When a token repeats inside
the prefix (rare with ``vocab_size`` much larger than ``length``: a pair repeats with probability
about 1/V), the current token has more than one earlier occurrence, and an induction head matching on
content alone may follow the wrong one; the copy's position p − n + 1 holds the target whatever the
prefix, so the pattern stays correct.

Facts (nats on the scored tokens):

    chance_loss    ln V: a uniform guess over the vocabulary.
    floor_loss     0 and max_accuracy 1: the copy is deterministic.
    shortcut_loss  the bag of remaining tokens, the best predictor known here that needs no sparse
                   pattern: the first copy's token counts minus the second copy's so far (two
                   uniform averages over position ranges) leave the multiset of tokens not yet
                   repeated, and the target is a uniform draw from it. After k tokens of the second
                   copy (row n − 1 + k) its loss is ln(n − k) − ln(1 + Binomial(n − 1 − k, 1/V)) in
                   expectation: exact, averaged over k = 1 .. n − 1 (1.72 nats at V = 32, n = 16).
    unigram_loss   a weaker one, for comparison: E[ln D], D the number of distinct tokens in the
                   prefix, the in-context unigram (a predictor uniform over the distinct tokens of
                   its context; 2.54 nats at V = 32, n = 16). Bigram or unigram statistics learnt
                   across sequences gain nothing (tokens are i.i.d. uniform). E[ln D] is exact: D's
                   distribution after n draws from V tokens (the occupancy distribution) by dynamic
                   programming over the draws, P_{i+1}(d) = P_i(d)·d/V + P_i(d − 1)·(V − d + 1)/V.

Batches are drawn from the (task seed, data seed, split, batch index) generator alone; the task has
no instance of its own to draw.
"""

from __future__ import annotations

import math

import torch

from emergence_bench.registry import register_task
from emergence_bench.tasks.base import SyntheticTask, check_range

# One output cell per scored position, up to the per-cell logging limit
# (emergence_bench.engine.module.MAX_LOGGED_CELLS, 64); longer copies share cells (as mqar's queries).
MAX_POSITION_CELLS = 64


def distinct_count_distribution(vocab_size: int, draws: int) -> torch.Tensor:
    """[min(draws, vocab_size) + 1] float64: P(D = d), D the number of distinct values among ``draws``
    uniform draws (with replacement) from ``vocab_size`` values (the occupancy distribution)."""
    V, top = vocab_size, min(draws, vocab_size)
    d = torch.arange(top + 1, dtype=torch.float64)
    p = torch.zeros(top + 1, dtype=torch.float64)
    p[0] = 1.0
    for _ in range(draws):  # a draw repeats one of d seen values (d/V) or adds a new one ((V − d)/V)
        new = p * d / V
        new[1:] += p[:-1] * (V - d[:-1]) / V
        p = new
    return p


def expected_log_binomial_plus_one(trials: int, prob: float) -> float:
    """E[ln(1 + X)], X ~ Binomial(trials, prob), exactly (a sum over X's values)."""
    if trials == 0:
        return 0.0
    x = torch.arange(trials + 1, dtype=torch.float64)
    log_pmf = (torch.lgamma(torch.tensor(trials + 1.0, dtype=torch.float64)) - torch.lgamma(x + 1)
               - torch.lgamma(trials - x + 1) + x * math.log(prob) + (trials - x) * math.log1p(-prob))
    return float((log_pmf.exp() * torch.log1p(x)).sum())


@register_task("induction")
class Induction(SyntheticTask):
    """A random prefix of ``length`` tokens then its copy, 2·length tokens (seq_len one less).

        tokens   [B, 2n] long    uniform in [0, V); tokens[:, n:] == tokens[:, :n]
        scored   rows n .. 2n − 2 (the copy's tokens after its first)
        truth    row p marks key p − n + 1, the same in every sequence
        cells    scored row n + j -> cell j (bucketed into ≤ MAX_POSITION_CELLS cells beyond that many)
    """

    def __init__(self, vocab_size: int = 32, length: int = 16, task_seed: int = 0, batch_size: int = 64) -> None:
        try:
            check_range("vocab_size", vocab_size, 2)
        except ValueError as error:
            raise ValueError(f"{error} (one token would make every target certain and chance_loss 0)") from None
        try:
            check_range("length", length, 2)
        except ValueError as error:
            raise ValueError(f"{error} (a prefix of one token leaves no scored row in its copy)") from None
        super().__init__(batch_size, task_seed)
        self.vocab_size, self.length = vocab_size, length
        self.seq_len = 2 * length - 1
        self._unigram: float | None = None
        self._shortcut: float | None = None

    # --- generation ---------------------------------------------------------------------------
    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        """[batch_size, 2n] long: a uniform prefix [B, n], then the same prefix."""
        prefix = torch.randint(0, self.vocab_size, (batch_size, self.length), generator=generator)
        return torch.cat([prefix, prefix], dim=1)

    # --- positions ----------------------------------------------------------------------------
    @property
    def scored_rows(self) -> torch.Tensor:
        """[n − 1] long: rows n .. 2n − 2, each holding a copied token and predicting the next one."""
        return torch.arange(self.length, self.seq_len)

    @property
    def loss_mask(self) -> torch.Tensor:
        return torch.arange(self.seq_len) >= self.length

    @property
    def output_cell(self) -> torch.Tensor:
        cells = torch.full((self.seq_len,), -1, dtype=torch.long)
        scored = self.length - 1
        n = min(scored, MAX_POSITION_CELLS)
        cells[self.scored_rows] = torch.arange(scored) * n // scored
        return cells

    def ground_truth_attention(self) -> torch.Tensor:
        """[seq_len, seq_len] 0/1, exact for every sequence: row p (n ≤ p ≤ 2n − 2) marks key
        p − n + 1, the first copy's position of the token row p predicts."""
        pattern = torch.zeros(self.seq_len, self.seq_len, dtype=torch.long)
        rows = self.scored_rows
        pattern[rows, rows - self.length + 1] = 1
        return pattern

    def probe_keys(self) -> torch.Tensor:
        """Scored rows: the n first-copy positions (where the token to copy sits)."""
        keys = torch.zeros(self.seq_len, self.seq_len, dtype=torch.bool)
        keys[self.scored_rows, : self.length] = True
        return keys

    # --- facts --------------------------------------------------------------------------------
    @property
    def chance_loss(self) -> float:
        """ln V: a uniform guess over the vocabulary."""
        return math.log(self.vocab_size)

    @property
    def unigram_loss(self) -> float:
        """E[ln D], D the distinct tokens of the prefix: the in-context unigram (module docstring),
        exact from the occupancy distribution."""
        if self._unigram is None:
            p = distinct_count_distribution(self.vocab_size, self.length)
            d = torch.arange(1, p.numel(), dtype=torch.float64)
            self._unigram = float((p[1:] * d.log()).sum())
        return self._unigram

    @property
    def shortcut_loss(self) -> float:
        """The orderless bag-of-remaining-tokens predictor's loss (module docstring), exact: the mean
        over k = 1 .. n − 1 of ln(n − k) − E[ln(1 + Binomial(n − 1 − k, 1/V))]."""
        if self._shortcut is None:
            n, V = self.length, self.vocab_size
            terms = [math.log(n - k) - expected_log_binomial_plus_one(n - 1 - k, 1 / V) for k in range(1, n)]
            self._shortcut = sum(terms) / len(terms)
        return self._shortcut
