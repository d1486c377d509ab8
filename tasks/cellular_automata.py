"""Cellular automata with a pool of random rules (docs/science.md, "Cellular automata").

Every sequence follows one rule from a pool drawn once per task instance, so the model has to infer
the rule in context from the trajectory before it can predict the next state.

Named patterns: ``predict`` (row p marks the previous state's window of token p + 1's cell) and
``own`` (row p marks the previous state's window of token p's own cell). A model that infers the rule
in context needs ``own``: it pairs each cell it holds with the window that produced it, a
"window -> outcome" example.

What is reachable, from an exact Bayes oracle (the rule pool known, a uniform prior over it) run on a
fixed set of sequences drawn from the task seed: ``max_accuracy`` and ``floor_loss``. Early tokens of
a sequence are uncertain (few rules are ruled out yet), so the floor is positive. ``shortcut_loss`` is
the in-context colour-count model, which needs no sparse pattern (C=4, 256 rules, T=16: 1.24 at
S=4, under the paper's plateau threshold 1.3 (docs/science.md)), or the uniform guess (chance) where that is lower.
"""

from __future__ import annotations

from abc import abstractmethod

import torch

from emergence_bench.registry import register_task
from emergence_bench.tasks.base import StateTrajectoryTask, check_range, seeded_generator

DEFAULT_BATCH_SIZE = 64
ORACLE_TOKENS = 512 * 256  # the oracle's sequences: about this many tokens, 64 to 512 sequences
COUNT_ALPHAS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # Dirichlet smoothing grid of the count shortcut


class WindowRuleTask(StateTrajectoryTask):
    """Trajectories of S cells with C colours where cell i of x_{t+1} is a function (the sequence's
    rule, one of a pool of ``rules``) of the window x_t[i-r], ..., x_t[i+r] with a periodic boundary.

    Shared by ``cellular_automata`` (lookup tables) and ``neural_ca`` (small networks): parameter
    checks, the batch size (``batch_size`` or ``tokens_per_batch``), the window ``neighbours``
    [S, 2r+1] and its base-C code ``window_index``, the circulant ground truth and the ``own``
    pattern, generation, and the Bayes oracle behind ``max_accuracy``, ``floor_loss`` and
    ``shortcut_loss``. Subclasses draw their pool and define ``step(state [B, S], rules) -> [B, S]``,
    where ``rules`` is what ``select_rules`` gives, and ``rule_tables() -> [rules, C**(2r+1)]``, each
    rule's output for every window code.
    """

    # The default attention bias: only the first layer, half its heads on `predict` and half on
    # `own`, so rule inference (own windows, then later layers looking back) is not suppressed.
    bias_defaults = {"layers": [0], "patterns": ("predict", "own")}

    def __init__(self, state_size: int, colors: int, radius: int, rules: int, trajectory_length: int,
                 task_seed: int, batch_size: int | None, tokens_per_batch: int | None) -> None:
        check_range("state_size", state_size, 1)
        check_range("trajectory_length", trajectory_length, 2)
        check_range("colors", colors, 2)
        try:  # the window of 2r + 1 cells must fit in the state
            check_range("radius", radius, 0, (state_size - 1) // 2)
        except ValueError as error:
            raise ValueError(f"{error} (the window 2·radius+1 must fit in state_size={state_size})") from None
        check_range("rules", rules, 1)
        batch_size = self._batch_size(batch_size, tokens_per_batch, state_size * trajectory_length)
        super().__init__(state_size, trajectory_length, batch_size, task_seed)
        self.vocab_size = colors
        self.colors, self.radius, self.rules = colors, radius, rules
        self.tokens_per_batch = tokens_per_batch
        offsets = torch.arange(-radius, radius + 1)
        self.neighbours = (torch.arange(state_size)[:, None] + offsets) % state_size  # [S, 2r+1]
        width = 2 * radius + 1
        self.place = colors ** torch.arange(width - 1, -1, -1)  # [2r+1]: digit k weighs C**(width-1-k)
        self._oracle_cache: dict | None = None  # filled on first use: validating a config stays cheap

    @staticmethod
    def _batch_size(batch_size: int | None, tokens_per_batch: int | None, tokens_per_sequence: int) -> int:
        if batch_size is not None and tokens_per_batch is not None:
            raise ValueError("give batch_size or tokens_per_batch, not both")
        if tokens_per_batch is None:
            return DEFAULT_BATCH_SIZE if batch_size is None else batch_size
        try:
            check_range("tokens_per_batch", tokens_per_batch, tokens_per_sequence)
        except ValueError as error:
            raise ValueError(f"{error} (a batch holds at least one sequence of state_size·trajectory_length "
                             f"= {tokens_per_sequence} tokens)") from None
        return tokens_per_batch // tokens_per_sequence

    def select_rules(self, chosen: torch.Tensor) -> torch.Tensor:
        """chosen [B] pool indices -> what ``step`` takes as the sequences' rules (default: the indices)."""
        return chosen

    @abstractmethod
    def step(self, state: torch.Tensor, rules: torch.Tensor) -> torch.Tensor:
        """state [B, S], the sequences' rules -> the next state [B, S] (each task its own)."""

    def generate(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        rules = self.select_rules(torch.randint(0, self.rules, (batch_size,), generator=generator))
        state = torch.randint(0, self.colors, (batch_size, self.state_size), generator=generator)
        states = [state]
        for _ in range(self.trajectory_length - 1):
            state = self.step(state, rules)
            states.append(state)
        return torch.cat(states, dim=1)

    def source_cells(self) -> torch.Tensor:
        """[S, S] circulant 0/1: row i marks cells i-r, ..., i+r (mod S)."""
        S = self.state_size
        return torch.zeros(S, S, dtype=torch.long).scatter_(1, self.neighbours, 1)

    def window_index(self, state: torch.Tensor) -> torch.Tensor:
        """state [..., S] long -> [..., S] long: cell i's window x[i-r..i+r] as a base-C number,
        leftmost cell most significant (the column of ``rule_tables``)."""
        return (state[..., self.neighbours] * self.place).sum(dim=-1)

    @abstractmethod
    def rule_tables(self) -> torch.Tensor:
        """[rules, C**(2r+1)] long: each pool rule's output for every window code."""

    # --- named patterns -----------------------------------------------------------------------
    def own_attention(self) -> torch.Tensor:
        """[seq_len, seq_len] 0/1: row p holds token p, cell j of state t; it marks cells j-r..j+r
        (periodic) of state t − 1, the window that produced it. Rows of state 0 mark nothing."""
        S = self.state_size
        pattern = torch.zeros(self.seq_len, self.seq_len, dtype=torch.long)
        for t in range(1, self.trajectory_length):
            rows = t * S + torch.arange(S)  # the rows holding state t's cells
            keep = rows < self.seq_len  # the last token is a target only, never read
            pattern[rows[keep], (t - 1) * S : t * S] = self.source_cells()[keep]
        return pattern

    def ground_truth_patterns(self) -> dict[str, torch.Tensor]:
        return {"predict": self.ground_truth_attention(), "own": self.own_attention()}

    # --- the Bayes oracle and the count shortcut ----------------------------------------------
    def bayes_oracle(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact posterior predictive of every scored token, the rule pool known.

            tokens  [B, S·T] long whole sequences
            returns (p_true, p_max), each [B, S·(T−1)] float64: the predictive probability of the
                    true token, and of the most probable colour (the Bayes greedy predictor's
                    expected accuracy on that token, whatever the tie-break)

        Walks the scored tokens in order, keeping per sequence the pool rules consistent with every
        transition revealed so far (cells of the current state already seen count too). A uniform
        prior over the pool makes the predictive the share of consistent rules that output each
        colour for the token's window.
        """
        B, S, C = tokens.shape[0], self.state_size, self.colors
        states = tokens.view(B, self.trajectory_length, S)
        windows = self.window_index(states[:, :-1]).flatten(1)  # [B, S·(T−1)]: each target's window
        targets = states[:, 1:].flatten(1)  # [B, S·(T−1)]
        by_window = self.rule_tables().T.contiguous()  # [C**(2r+1), R]
        consistent = torch.ones(B, by_window.shape[1], dtype=torch.float64)  # [B, R] 1 = not ruled out
        p_true = torch.empty(targets.shape, dtype=torch.float64)
        p_max = torch.empty(targets.shape, dtype=torch.float64)
        for k in range(targets.shape[1]):
            outputs = by_window[windows[:, k]]  # [B, R]: every rule's output for this window
            votes = torch.zeros(B, C, dtype=torch.float64).scatter_add_(1, outputs, consistent)
            predictive = votes / consistent.sum(dim=1, keepdim=True)  # [B, C]
            p_true[:, k] = predictive.gather(1, targets[:, k, None])[:, 0]
            p_max[:, k] = predictive.max(dim=1).values
            consistent *= outputs == targets[:, k, None]  # the true rule always survives
        return p_true, p_max

    @staticmethod
    def count_model_loss(tokens: torch.Tensor, colors: int, first: int, alpha: float) -> torch.Tensor:
        """The in-context count shortcut: token k is predicted from the colours of tokens 0..k−1 of
        its own sequence, p(c) = (n_c + α) / (k + C·α) (Dirichlet smoothing α).

            tokens [B, N] long -> [B, N − first] float64, −log p(true token) of tokens first..N−1
        """
        onehot = torch.nn.functional.one_hot(tokens, colors).double()  # [B, N, C]
        seen = onehot.cumsum(dim=1) - onehot  # [B, N, C]: counts before each token
        n_true = (seen * onehot).sum(dim=-1)  # [B, N]
        position = torch.arange(tokens.shape[1], dtype=torch.float64)
        loss = -torch.log((n_true + alpha) / (position + colors * alpha))
        return loss[:, first:]

    def oracle_sequences(self) -> torch.Tensor:
        """[B, S·T] fixed sequences for the oracle, from their own stream of the task seed: about
        ORACLE_TOKENS tokens, between 64 and 512 sequences."""
        n = min(512, max(64, ORACLE_TOKENS // (self.state_size * self.trajectory_length)))
        return self.generate(seeded_generator(self.task_seed, "oracle", n), n)

    def oracle_statistics(self) -> dict:
        """{max_accuracy, floor_loss, shortcut_loss, shortcut_alpha, sequences}, computed once.
        shortcut_alpha is None when no α of COUNT_ALPHAS beats the uniform guess (the shortcut is then
        chance: a uniform guess needs no pattern either)."""
        if self._oracle_cache is None:
            tokens = self.oracle_sequences()
            p_true, p_max = self.bayes_oracle(tokens)
            counts = {alpha: float(self.count_model_loss(tokens, self.colors, self.state_size, alpha).mean())
                      for alpha in COUNT_ALPHAS}
            best = min(counts, key=lambda a: counts[a])
            alpha: float | None = best
            shortcut = counts[best]
            if shortcut > self.chance_loss:  # counting loses to a uniform guess (short, even sequences)
                alpha, shortcut = None, self.chance_loss
            self._oracle_cache = {
                "max_accuracy": float(p_max.mean()),
                "floor_loss": float(-p_true.log().mean()),
                "shortcut_loss": shortcut,
                "shortcut_alpha": alpha,
                "sequences": tokens.shape[0],
            }
        return self._oracle_cache

    @property
    def max_accuracy(self) -> float:
        """Bayes greedy accuracy with the rule pool known (oracle estimate, see bayes_oracle)."""
        return self.oracle_statistics()["max_accuracy"]

    @property
    def floor_loss(self) -> float:
        """Bayes loss with the rule pool known (oracle estimate): positive, early tokens are uncertain."""
        return self.oracle_statistics()["floor_loss"]

    @property
    def shortcut_loss(self) -> float:
        """Loss of the in-context colour-count model, at its best smoothing α of COUNT_ALPHAS, or the
        chance loss when that is lower (a shortcut is never worse than a uniform guess)."""
        return self.oracle_statistics()["shortcut_loss"]


@register_task("cellular_automata")
class CellularAutomata(WindowRuleTask):
    """Trajectories [x_0; x_1; ...; x_{T-1}] of S cells with C colours, flattened to S·T tokens.

    x_0 is uniform and unscored. Cell i of x_{t+1} is ``table[w]``, where w encodes the window
    x_t[i-r], ..., x_t[i+r] (periodic boundary) as a base-C integer, leftmost cell most significant.

        tables   [rules, C**(2r+1)] long   the rule pool, uniform in [0, C), from ``task_seed`` only
        batch    [B, S·T] long             each sequence picks one table uniformly

    The pool does not depend on ``state_size`` or ``trajectory_length``, so a sweep over S keeps the
    same rules. Give ``tokens_per_batch`` instead of ``batch_size`` to hold the number of tokens per
    batch fixed while S varies (the paper's setting): B = tokens_per_batch // (S·T).
    """

    def __init__(
        self,
        state_size: int = 16,
        colors: int = 4,
        radius: int = 1,
        rules: int = 256,
        trajectory_length: int = 16,
        task_seed: int = 0,
        batch_size: int | None = None,
        tokens_per_batch: int | None = None,
    ) -> None:
        super().__init__(state_size, colors, radius, rules, trajectory_length, task_seed, batch_size,
                         tokens_per_batch)
        width = 2 * radius + 1
        g = seeded_generator(task_seed, "cellular_automata.rules", colors, radius, rules)
        self.tables = torch.randint(0, colors, (rules, colors**width), generator=g)

    def select_rules(self, chosen: torch.Tensor) -> torch.Tensor:
        return self.tables[chosen]  # [B, C**(2r+1)]

    def rule_tables(self) -> torch.Tensor:
        return self.tables

    def step(self, state: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
        """One transition: state [B, S] long, tables [B, C**(2r+1)] long -> next state [B, S] long."""
        return tables.gather(1, self.window_index(state))
