"""Dyck-k: balanced strings of k bracket types, for next-token prediction (pre-pre-training, docs/science.md claim 8).

Tokens: opener of type j is ``j``, its closer is ``k + j`` (vocabulary 2k). A sequence of ``length``
tokens is a random walk on the nesting depth that starts and ends at depth 0 and never exceeds
``max_depth``: while depth 0 it opens; at ``max_depth``, or when the remaining tokens are just enough
to close every open bracket, it closes; otherwise it opens with probability ``open_prob``. An opener's
type is uniform; a closer's type is forced (it matches the top of the stack). So a sequence is a
concatenation of balanced Dyck strings that fills the length exactly, and is itself balanced.

What is scored, ``score``:

``"all"`` (the default; ladder v2's rows): every row (``loss_mask`` all True). An opener's type and
the open/close decision are random, so the loss floor is positive: ``floor_loss`` is the exact entropy
of the generating process per token, and ``max_accuracy`` the best greedy accuracy, both computed by
dynamic programming over the depth. Only a closer is fully predictable, and only it has a true source,
so most of what this accuracy measures is noise on openers (0.572 at most at length 32).

``"closers"``: only the rows whose target is a closer, the tokens the matching pattern decides — the
capability the family names. Which rows those are changes per sequence (``per_sequence_scoring``):
``scored_mask(tokens)`` [B, L] is ``tokens[:, 1:] >= k``, and ``loss_mask`` is the rows some sequence
scores (those of the envelope below: every row when max_depth ≥ 2). Every other row's loss and
accuracy are still measured (the run's full-sequence loss and accuracy). Its facts, on closer rows:

    max_accuracy   1: the matching opener decides the closer.
    floor_loss     0: what a model trained on these rows can reach — every scored target is a closer,
                   so it may put all its mass on the matching one (its rows are the only ones it
                   answers for). Under ``trainer.train_on: all`` the model learns the true next-token
                   distribution instead, and a closer that could have been an opener costs it
                   −ln(1 − open_prob) on top: the floor stated here is then not reached.
    chance_loss    ln k, a uniform guess among the k closers: what a model that has learnt that a
                   scored token is a closer (a unigram over the targets, a few steps) but not which
                   one reaches (as mqar's chance is over the values, not the vocabulary), so plateau
                   thresholds sit below that easy drop.
    shortcut_loss  the bag of brackets: a predictor that counts, for each type, the brackets opened and
                   not closed (a uniform average over the prefix gives the counts; no sparse pattern)
                   but not their order, so it predicts type j with probability c_j / d (c_j unclosed
                   brackets of type j, d the depth). The structure is independent of the types, so
                   the d unclosed types are i.i.d. uniform and the top's count is 1 + Binomial(d − 1,
                   1/k): the loss is E[−ln((1 + X)/d)] over the depth at closer rows, exact by the
                   same dynamic programming. At depth 1 it is exact (so max_depth 1 has no pattern to
                   find), and it is the best predictor without order (the types of the unclosed
                   brackets are exchangeable given their counts). ``shortcut_accuracy`` is its greedy
                   accuracy (ties broken uniformly). Predicting the most recent opener's closer is not
                   a shortcut in this sense: finding the most recent opener is itself a sparse pattern.

The emergence threshold is τ × max_accuracy = τ (0.95 by default), above the bag's accuracy (0.79 at
k = 2, max_depth 8, length 32; 0.63 at k = 4, length 64); the plateau threshold is
``min(chance, shortcut) − frac · that``.

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
SCORES = ("all", "closers")  # what ``score`` may name


@register_task("dyck")
class Dyck(SyntheticTask):
    """Balanced bracket sequences of ``length`` tokens (seq_len = length - 1).

        tokens   [B, length] long   openers 0..k-1, closers k..2k-1, balanced, depth ≤ max_depth
        cells    positions grouped into ≤ POSITION_SPANS equal spans (row p -> cell p·n // seq_len)
    """

    per_sequence_truth = True  # ground_truth_attention() is an envelope; see ground_truth_for
    per_sequence_scoring: bool  # score "closers": the rows that hold a closer, per sequence

    def __init__(
        self,
        bracket_types: int = 4,
        max_depth: int = 8,
        length: int = 64,
        open_prob: float = 0.5,
        task_seed: int = 0,
        batch_size: int = 64,
        score: str = "all",
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
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        super().__init__(batch_size, task_seed)
        self.score = score
        self.per_sequence_scoring = score == "closers"
        self.bracket_types, self.max_depth, self.length = bracket_types, max_depth, length
        self.open_prob = float(open_prob)
        self.vocab_size = 2 * bracket_types
        self.seq_len = length - 1
        self._floor, self._max_accuracy, self._closer_depths = self._process_statistics()
        self._bag: tuple[float, float] | None = None  # the bag of brackets' (loss, accuracy), when asked

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
        """[L] bool: every row; scoring closers, the rows that predict a closer in some sequence."""
        if self.score == "closers":
            return self.ground_truth_attention().sum(-1) > 0
        return torch.ones(self.seq_len, dtype=torch.bool)

    def scored_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, length] -> [B, seq_len] bool: scoring closers, the rows whose target is a closer
        (row p when token p + 1 ≥ k; the last token always is one); else every row."""
        if self.score == "closers":
            return tokens[:, 1:] >= self.bracket_types
        return super().scored_mask(tokens)

    @property
    def output_cell(self) -> torch.Tensor:
        """[L] long: the rows ``loss_mask`` scores in at most POSITION_SPANS equal spans, in order
        (every row when all are scored); -1 on a row never scored."""
        mask = self.loss_mask
        count = int(mask.sum())
        cells = min(count, POSITION_SPANS)
        rank = mask.long().cumsum(0) - 1  # the row's index among the scored rows
        return torch.where(mask, rank * cells // count, -1)

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
    def chance_loss(self) -> float:
        """ln 2k, a uniform guess over the vocabulary; scoring closers, ln k (among the closers)."""
        return math.log(self.bracket_types if self.score == "closers" else self.vocab_size)

    @property
    def floor_loss(self) -> float:
        """Mean over scored rows of the entropy (nats) of the next token given the prefix; scoring
        closers, 0 (the module docstring says why)."""
        return 0.0 if self.score == "closers" else self._floor

    @property
    def max_accuracy(self) -> float:
        """The best expected greedy accuracy over scored rows (a closer is certain, an opener is not)."""
        return 1.0 if self.score == "closers" else self._max_accuracy

    @property
    def shortcut_loss(self) -> float | None:
        """Scoring closers, the bag of brackets' mean loss on closer rows (module docstring); else
        None (not defined)."""
        if self.score != "closers":
            return None
        return self._bag_statistics()[0]

    @property
    def shortcut_accuracy(self) -> float:
        """The bag of brackets' expected greedy accuracy on closer rows (ties broken uniformly)."""
        return self._bag_statistics()[1]

    def _bag_statistics(self) -> tuple[float, float]:
        """(loss, accuracy) of the bag of brackets over closer rows: at depth d the top's type has
        count 1 + X, X ~ Binomial(d − 1, 1/k), among d i.i.d. uniform unclosed types; weighted by the
        expected number of closer rows at each depth (``_closer_depths``)."""
        if self._bag is not None:
            return self._bag
        weights = self._closer_depths
        total = sum(weights)
        loss = sum(w * bag_loss(d, self.bracket_types) for d, w in enumerate(weights) if w)
        accuracy = sum(w * bag_accuracy(d, self.bracket_types) for d, w in enumerate(weights) if w)
        self._bag = (loss / total, accuracy / total)
        return self._bag

    def _process_statistics(self) -> tuple[float, float, list[float]]:
        """(floor_loss, max_accuracy, closer depths) by propagating the depth distribution token by
        token. closer depths[d]: the expected number of predicted tokens (1..length−1) that close a
        bracket from depth d (d before the close)."""
        k, p, n, D = self.bracket_types, self.open_prob, self.length, self.max_depth
        # The next token's entropy and top probability in each situation: forced open (uniform type),
        # forced close (certain), free (open w.p. p with a uniform type, else the known closer).
        free_entropy = -(1 - p) * math.log(1 - p) - p * math.log(p / k)
        cases = {"open": (math.log(k), 1 / k), "close": (0.0, 1.0), "free": (free_entropy, max(1 - p, p / k))}
        top = min(D, n // 2)
        prob = [1.0] + [0.0] * top  # prob[d]: probability of depth d before token i
        entropy = accuracy = 0.0
        closers = [0.0] * (top + 1)
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
                    closers[d] += q * {"open": 0.0, "close": 1.0, "free": 1 - p}[case]
                if case == "open":
                    nxt[d + 1] += q
                elif case == "close":
                    nxt[d - 1] += q
                else:
                    nxt[d + 1] += q * p
                    nxt[d - 1] += q * (1 - p)
            prob = nxt
        return entropy / self.seq_len, accuracy / self.seq_len, closers


def bag_loss(depth: int, k: int) -> float:
    """E[−ln((1 + X) / depth)], X ~ Binomial(depth − 1, 1/k): the bag of brackets' loss on a closer
    at ``depth`` (the top's type among ``depth`` i.i.d. uniform unclosed types)."""
    n = depth - 1
    return sum(math.comb(n, x) * (1 / k) ** x * (1 - 1 / k) ** (n - x) * -math.log((1 + x) / depth)
               for x in range(n + 1))


def bag_accuracy(depth: int, k: int) -> float:
    """The probability that the bag of brackets' greedy guess (the most frequent unclosed type, ties
    broken uniformly) is the top's type, at ``depth`` with ``depth`` i.i.d. uniform types over k.

    The top's type has c = 1 + X of the depth; the other k − 1 types share the remaining depth − c
    multinomially. Per c, a polynomial over the other types in turn tracks (tokens used, types tied
    at c), each type's count below c or equal to it; a type above c makes the guess wrong."""
    n = depth - 1
    total = 0.0
    for c in range(1, depth + 1):
        rest = depth - c  # the other types' tokens
        # ways[u][e]: Σ over the counts of the types so far (u tokens, e of them tied at c) of 1/Π n_j!
        ways = [[0.0] * k for _ in range(rest + 1)]
        ways[0][0] = 1.0
        for _ in range(k - 1):
            nxt = [[0.0] * k for _ in range(rest + 1)]
            for u in range(rest + 1):
                for e in range(k - 1):
                    if ways[u][e]:
                        for m in range(min(c, rest - u) + 1):
                            nxt[u + m][e + (m == c)] += ways[u][e] / math.factorial(m)
            ways = nxt
        # Multinomial: n! / ((c − 1)! Π n_j!) assignments of the other n tokens, each of prob. k^−n.
        scale = math.factorial(n) / math.factorial(c - 1) * k ** -n
        total += sum(scale * w / (1 + e) for e, w in enumerate(ways[rest]))
    return total
