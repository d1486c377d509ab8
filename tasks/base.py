"""The Task contract: a LightningDataModule of synthetic sequences generated on the fly.

A task produces token sequences ``[B, seq_len + 1]``; the model reads ``model_inputs(tokens)``
(default ``tokens[:, :-1]``) and the logit at query row p predicts ``tokens[:, p + 1]``: the targets
are always ``tokens[:, 1:]``. A task overrides ``model_inputs`` to hide something from the model
without changing what is scored (linear_map's ``blank_outputs`` replaces the input tokens of x1 by a
blank). Everything a task says about positions is in query-row coordinates (length ``seq_len``), so
the next-token shift lives here, once:

    model_inputs(tokens)      [B, seq_len + 1] -> [B, seq_len] long, what the model reads
    loss_mask                 [seq_len] bool   rows whose target is scored (per_sequence_scoring: rows
                                               that may be scored in some sequence)
    scored_mask(tokens)       [B, seq_len + 1] -> [B, seq_len] bool, the rows scored in each sequence:
                              ``loss_mask`` on every sequence, unless ``per_sequence_scoring`` (Dyck
                              scored on its closers: which rows hold a closer changes per sequence)
    output_cell               [seq_len] long   which output cell a scored row predicts (-1: unscored)
    ground_truth_attention()  [seq_len, seq_len] 0/1, row p marks the keys that determine token p+1
    ground_truth_patterns()   {name: [seq_len, seq_len] 0/1}, ``predict`` is ground_truth_attention();
                              ``pattern(name)`` picks one (cellular automata add ``own``), or one of
                              the CONTROLS every task has (``control_patterns``: placebo, near_miss)

What a task reaches and what a shortcut reaches, for thresholds (losses in nats on scored tokens):

    chance_loss     a uniform guess over the vocabulary
    floor_loss      the lowest achievable loss (0 for deterministic targets)
    max_accuracy    the best achievable greedy accuracy (1 for deterministic targets)
    shortcut_loss   the loss of the best predictor that uses no sparse attention pattern (None: not
                    defined for the task); a plateau threshold above it measures the shortcut

Batches are deterministic functions of (task seed, data seed, split, batch index): a resumed run sees
the same stream, and train and eval streams never share a generator. The task instance (e.g. the
matrix A) comes from the task seed alone, independent of the model seed.
"""

from __future__ import annotations

import hashlib
from abc import ABCMeta, abstractmethod
from typing import Any, Iterator, cast

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

CONTROLS = ("near_miss", "placebo")  # the control patterns every task has (control_patterns)


def seeded_generator(*key: object) -> torch.Generator:
    """A CPU generator seeded by a stable hash of ``key`` (any printable values)."""
    digest = hashlib.sha256(repr(key).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def check_range(name: str, value: float, low: float | None = None, high: float | None = None) -> None:
    """Raise a ValueError naming ``name`` and its valid range unless low ≤ value ≤ high."""
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")


class TrainStream(IterableDataset):
    """Endless train batches, starting at batch ``start`` (the global step on resume)."""

    def __init__(self, task: "SyntheticTask", start: int = 0) -> None:
        self.task, self.start = task, start

    def __iter__(self) -> Iterator[torch.Tensor]:
        index = self.start
        while True:
            yield self.task.batch("train", index)
            index += 1


class SyntheticTask(L.LightningDataModule, metaclass=ABCMeta):
    """Subclasses set ``vocab_size`` and ``seq_len`` and implement ``generate``, ``loss_mask``,
    ``output_cell`` and ``ground_truth_attention``; they validate their parameters in ``__init__``."""

    vocab_size: int
    seq_len: int

    def __init__(self, batch_size: int, task_seed: int) -> None:
        super().__init__()
        check_range("batch_size", batch_size, 1)
        self.batch_size = batch_size
        self.task_seed = task_seed
        self.data_seed = 0
        self.eval_batches = 4

    # --- what subclasses define -------------------------------------------------------------
    @abstractmethod
    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        """[batch_size, seq_len + 1] long tokens drawn with ``generator``."""

    @property
    @abstractmethod
    def loss_mask(self) -> torch.Tensor:
        """[seq_len] bool: the query rows whose target token is scored."""

    @property
    @abstractmethod
    def output_cell(self) -> torch.Tensor:
        """[seq_len] long: the output cell each scored row predicts, -1 on unscored rows."""

    @abstractmethod
    def ground_truth_attention(self) -> torch.Tensor:
        """[seq_len, seq_len] 0/1: row p marks the key positions that determine token p + 1."""

    def ground_truth_patterns(self) -> dict[str, torch.Tensor]:
        """{name: [seq_len, seq_len] 0/1} in query-row coordinates (row p is the query at token p).
        ``predict`` (row p marks the keys that determine token p + 1) is always there."""
        return {"predict": self.ground_truth_attention()}

    def control_patterns(self) -> dict[str, torch.Tensor]:
        """{placebo, near_miss}: patterns shaped like ``predict`` that mark none of its keys, for a
        bias that is not the truth (a placebo arm and a near-miss arm). Row p of either marks
        min(ones of predict's row p, non-source keys of the row) keys among its non-source keys: the
        keys of ``probe_keys()`` row p that predict's row p does not mark (causal, as probe_keys is).
        Rows where predict is zero stay zero; the dtype is predict's.

        ``placebo``: those keys drawn uniformly among the row's non-source keys, from a generator of
        the task seed alone (never the global RNG): the same pattern at every call.
        ``near_miss``: with the row's allowed keys (probe_keys row p) in order, as a cycle, each
        source in turn, from the first, takes the nearest key that is neither a source nor already
        taken, trying offsets +1, −1, +2, −2, ... (wrapping from the last allowed key to the first).
        A source finds none only when every non-source key is taken."""
        truth = self.ground_truth_attention()
        sources, allowed = truth.bool(), self.probe_keys()
        free = allowed & ~sources
        count = torch.minimum(sources.sum(1), free.sum(1))  # [L] ones per row of either control
        score = torch.rand(truth.shape, generator=seeded_generator(self.task_seed, "control.placebo"))
        rank = score.masked_fill(~free, 2.0).argsort(1).argsort(1)  # free keys first, in random order
        placebo = (rank < count[:, None]).to(truth.dtype)
        near_miss = torch.zeros_like(truth)
        for row in sources.any(1).nonzero()[:, 0].tolist():
            keys = allowed[row].nonzero()[:, 0].tolist()  # the row's allowed keys, in order: a cycle
            n = len(keys)
            taken = sources[row, keys].tolist()  # sources, then the near misses placed
            for i in [i for i in range(n) if taken[i]]:
                near = [(i + d) % n for k in range(1, n) for d in (k, -k)]  # +1, −1, +2, −2, ...
                j = next((j for j in near if not taken[j]), None)
                if j is not None:
                    taken[j] = True
                    near_miss[row, keys[j]] = 1
        return {"placebo": placebo, "near_miss": near_miss}

    def pattern(self, name: str) -> torch.Tensor:
        """The named ground-truth pattern [seq_len, seq_len], or a control (``control_patterns``);
        a ValueError lists the valid names."""
        patterns = self.ground_truth_patterns()
        if name in patterns:
            return patterns[name]
        if name in CONTROLS:
            return self.control_patterns()[name]
        raise ValueError(f"unknown pattern {name!r} for {type(self).__name__}; "
                         f"valid names: {', '.join(sorted(patterns))} (controls: {', '.join(CONTROLS)})")

    # What `attention_bias: {strength: c}` does on this task (layers "all" or indices, and the named
    # patterns spread over each biased layer's heads in equal blocks).
    bias_defaults: dict[str, Any] = {"layers": "all", "patterns": ("predict",)}

    # False: every sequence is scored on the rows of ``loss_mask`` (the engine selects them by index).
    # True: ``scored_mask(tokens)`` differs per sequence (the engine weights each row by it), and
    # ``loss_mask`` is the rows some sequence scores.
    per_sequence_scoring: bool = False

    def scored_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, seq_len + 1] -> [B, seq_len] bool: the rows scored in each sequence, a subset of
        ``loss_mask``'s. The default is ``loss_mask`` on every sequence. A task that overrides it (and
        sets ``per_sequence_scoring``) computes it out of place from ``tokens`` alone, so it also runs
        under vmap (seed-parallel), and scores at least one row of every sequence."""
        return self.loss_mask.to(tokens.device).expand(tokens.shape[0], -1)

    def model_inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, seq_len + 1] -> what the model reads [B, seq_len] (default: ``tokens[:, :-1]``).
        The targets are ``tokens[:, 1:]`` whatever this returns."""
        return tokens[:, :-1]

    def probe_keys(self) -> torch.Tensor:
        """[seq_len, seq_len] bool: the keys over which a row's attention entropy is measured
        (default: every key the row can see)."""
        return torch.ones(self.seq_len, self.seq_len, dtype=torch.bool).tril()

    @property
    def chance_loss(self) -> float:
        """Cross-entropy (nats) of a uniform guess over the vocabulary."""
        return float(torch.log(torch.tensor(float(self.vocab_size))))

    @property
    def floor_loss(self) -> float:
        """The lowest achievable loss on scored tokens (0 for deterministic targets)."""
        return 0.0

    @property
    def max_accuracy(self) -> float:
        """The best achievable greedy accuracy on scored tokens (1 for deterministic targets)."""
        return 1.0

    @property
    def shortcut_loss(self) -> float | None:
        """Loss of the best predictor that uses no sparse attention pattern; None: not defined."""
        return None

    @property
    def num_cells(self) -> int:
        return int(self.output_cell.max()) + 1

    # --- streams ------------------------------------------------------------------------------
    def configure_streams(self, data_seed: int, eval_batches: int) -> None:
        """Set what the run decides: the train stream's seed and the eval set's size."""
        self.data_seed = data_seed
        self.eval_batches = eval_batches
        self._eval_set: list[torch.Tensor] | None = None

    def batch_generator(self, split: str, index: int) -> torch.Generator:
        """The generator of batch ``index`` of ``split``: train streams depend on the data seed, the
        eval set does not (every seed of a task is scored on the same sequences)."""
        seed = self.data_seed if split == "train" else "shared"
        return seeded_generator(self.task_seed, seed, split, index)

    def batch(self, split: str, index: int) -> torch.Tensor:
        return self.generate(self.batch_generator(split, index), self.batch_size)

    def train_dataloader(self) -> DataLoader:
        start = self.trainer.global_step if self.trainer is not None else 0
        return DataLoader(TrainStream(self, start), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        eval_set = getattr(self, "_eval_set", None)
        if eval_set is None:  # the same sequences at every eval
            eval_set = self._eval_set = [self.batch("eval", i) for i in range(self.eval_batches)]
        return DataLoader(cast("Dataset[torch.Tensor]", eval_set), batch_size=None)  # a list: a map-style dataset


class StateTrajectoryTask(SyntheticTask):
    """Trajectories of T states of S cells, flattened to S·T tokens: state 0 is random and unscored,
    every later cell is scored and depends on some cells of the state before it.

    Subclasses give ``source_cells()``: [S, S] 0/1, row i marks the cells of state t−1 that determine
    cell i of state t. The mask, the output cells and the ground-truth pattern follow from it.
    """

    def __init__(self, state_size: int, trajectory_length: int, batch_size: int, task_seed: int) -> None:
        check_range("state_size", state_size, 1)
        check_range("trajectory_length", trajectory_length, 2)
        super().__init__(batch_size, task_seed)
        self.state_size = state_size
        self.trajectory_length = trajectory_length
        self.seq_len = state_size * trajectory_length - 1

    @abstractmethod
    def source_cells(self) -> torch.Tensor:
        """[S, S] 0/1: row i marks the previous state's cells that cell i depends on."""

    @property
    def loss_mask(self) -> torch.Tensor:
        # Row p predicts token p + 1; tokens S.. (states 1..T-1) are scored.
        return torch.arange(self.seq_len) >= self.state_size - 1

    @property
    def output_cell(self) -> torch.Tensor:
        cell = (torch.arange(self.seq_len) + 1) % self.state_size
        return torch.where(self.loss_mask, cell, -1)

    def probe_keys(self) -> torch.Tensor:
        """Row predicting a cell of state t: the keys of state t − 1."""
        S = self.state_size
        keys = torch.zeros(self.seq_len, self.seq_len, dtype=torch.bool)
        for t in range(1, self.trajectory_length):
            keys[t * S - 1 : (t + 1) * S - 1, (t - 1) * S : t * S] = True
        return keys

    def ground_truth_attention(self) -> torch.Tensor:
        S = self.state_size
        sources = self.source_cells().long()
        pattern = torch.zeros(self.seq_len, self.seq_len, dtype=torch.long)
        for t in range(1, self.trajectory_length):
            rows = t * S - 1 + torch.arange(S)  # the rows that predict state t's cells
            pattern[rows, (t - 1) * S : t * S] = sources
        return pattern
