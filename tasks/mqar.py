"""Multi-query associative recall (MQAR, as in Zoology): the standard test of a mixer's in-context recall.

A sequence lists ``pairs`` key-value pairs, then asks ``queries`` of the keys again; after each query
key the model must output that key's value:

    k_0 v_0 k_1 v_1 ... k_{n-1} v_{n-1} | q_0 a_0 q_1 a_1 ... q_{Q-1} a_{Q-1}        (2n + 2Q tokens)

Keys come from the lower half of the vocabulary, [0, V//2), distinct within a sequence; values from
the upper half, [V//2, V), drawn with replacement; the queries are Q distinct keys of the context in
random order, and a_q is the value paired with q_q. Only the answers are scored: row 2n + 2q (the
query key's own row) predicts a_q.

Ground truth (per sequence; the queried pair moves): by default the row predicting a_q marks the
*value* position 2m + 1 of the queried pair m, the only context position that can hold the answer
(a key's position cannot see its value under causal mixing); ``source="key"`` marks the key's
position 2m instead (the content match). ``ground_truth_attention()`` is the union over sequences (every
context value, resp. key, position on the answer rows); ``ground_truth_for(tokens)`` gives each
sequence's own [L, L] pattern.
"""

from __future__ import annotations

import math

import torch

from emergence_bench.registry import register_task
from emergence_bench.tasks.base import SyntheticTask, check_range

# One output cell per query, up to the per-cell logging limit (emergence_bench.engine.module.MAX_LOGGED_CELLS, 64); more
# queries share cells. Larger than dyck's 16 position spans: here each cell is a query of its own.
MAX_QUERY_CELLS = 64
SOURCES = ("value", "key")


@register_task("mqar")
class MQAR(SyntheticTask):
    """Key-value pairs then queries, 2·pairs + 2·queries tokens (seq_len one less).

        tokens   [B, 2n + 2Q] long   keys in [0, V//2), values in [V//2, V)
        cells    query q -> cell q (bucketed into ≤ MAX_QUERY_CELLS cells beyond that many queries)
    """

    per_sequence_truth = True  # ground_truth_attention() is an envelope; see ground_truth_for

    def __init__(
        self,
        vocab_size: int = 64,
        pairs: int = 8,
        queries: int = 8,
        source: str = "value",
        task_seed: int = 0,
        batch_size: int = 64,
    ) -> None:
        try:
            check_range("vocab_size", vocab_size, 3)
        except ValueError as error:
            raise ValueError(f"{error} (keys are [0, vocab_size//2), values the rest; one value would "
                             f"make every answer certain and chance_loss 0)") from None
        check_range("pairs", pairs, 1, vocab_size // 2)  # distinct keys from V//2 key tokens
        check_range("queries", queries, 1, pairs)  # each key is asked at most once
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        super().__init__(batch_size, task_seed)
        self.vocab_size, self.pairs, self.queries, self.source = vocab_size, pairs, queries, source
        self.num_keys = vocab_size // 2
        self.num_values = vocab_size - self.num_keys
        self.seq_len = 2 * pairs + 2 * queries - 1

    # --- generation ---------------------------------------------------------------------------
    def _draw(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [B, 2n + 2Q] long, asked [B, Q] long: the context pair each query asks for)."""
        B, n, Q = batch_size, self.pairs, self.queries
        keys = torch.rand(B, self.num_keys, generator=generator).argsort(dim=1)[:, :n]  # distinct
        values = torch.randint(self.num_keys, self.vocab_size, (B, n), generator=generator)
        asked = torch.rand(B, n, generator=generator).argsort(dim=1)[:, :Q]
        context = torch.stack([keys, values], dim=2).flatten(1)  # [B, 2n]: k_0 v_0 k_1 v_1 ...
        recall = torch.stack([keys.gather(1, asked), values.gather(1, asked)], dim=2).flatten(1)  # [B, 2Q]
        return torch.cat([context, recall], dim=1), asked

    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        return self._draw(generator, batch_size)[0]

    def _truth(self, asked: torch.Tensor) -> torch.Tensor:
        """asked [B, Q] pair indices -> [B, seq_len, seq_len] long 0/1 per-sequence pattern."""
        B = asked.shape[0]
        truth = torch.zeros(B, self.seq_len, self.seq_len, dtype=torch.long)
        rows = self.answer_rows.expand(B, -1)  # [B, Q]
        keys = 2 * asked + (1 if self.source == "value" else 0)  # [B, Q]
        truth[torch.arange(B)[:, None], rows, keys] = 1
        return truth

    def ground_truth_for(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, 2n + 2Q] -> [B, seq_len, seq_len] long 0/1, found by looking each query key up
        among the context keys."""
        n = self.pairs
        context_keys = tokens[:, 0 : 2 * n : 2]  # [B, n]
        query_keys = tokens[:, 2 * n :: 2]  # [B, Q]
        asked = (query_keys[:, :, None] == context_keys[:, None, :]).long().argmax(dim=2)  # [B, Q]
        return self._truth(asked)

    # --- positions ----------------------------------------------------------------------------
    @property
    def answer_rows(self) -> torch.Tensor:
        """[Q] long: row 2n + 2q holds query q's key and predicts its answer."""
        return 2 * self.pairs + 2 * torch.arange(self.queries)

    @property
    def loss_mask(self) -> torch.Tensor:
        mask = torch.zeros(self.seq_len, dtype=torch.bool)
        mask[self.answer_rows] = True
        return mask

    @property
    def output_cell(self) -> torch.Tensor:
        cells = torch.full((self.seq_len,), -1, dtype=torch.long)
        n = min(self.queries, MAX_QUERY_CELLS)
        cells[self.answer_rows] = torch.arange(self.queries) * n // self.queries
        return cells

    def ground_truth_attention(self) -> torch.Tensor:
        """[seq_len, seq_len] 0/1 envelope: every answer row marks every context value (resp. key)
        position, the union of the per-sequence patterns."""
        pattern = torch.zeros(self.seq_len, self.seq_len, dtype=torch.long)
        start = 1 if self.source == "value" else 0
        pattern[self.answer_rows[:, None], torch.arange(start, 2 * self.pairs, 2)] = 1
        return pattern

    def probe_keys(self) -> torch.Tensor:
        """Answer rows: the 2n context positions (where the pair to recall sits)."""
        keys = torch.zeros(self.seq_len, self.seq_len, dtype=torch.bool)
        keys[self.answer_rows, : 2 * self.pairs] = True
        return keys

    @property
    def chance_loss(self) -> float:
        """A uniform guess among the values: the loss of a model that knows an answer is a value
        (learnt in a few steps) but not which one, so plateau thresholds sit below that easy drop."""
        return math.log(self.num_values)
