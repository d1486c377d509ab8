"""Cellular automata with a pool of random rules (PAPER.md, "Cellular automata").

Every sequence follows one rule from a pool drawn once per task instance, so the model has to infer
the rule in context from the trajectory before it can predict the next state.
"""

from __future__ import annotations

import torch

from benchmark.registry import register_task
from tasks.base import StateTrajectoryTask, check_range, seeded_generator

DEFAULT_BATCH_SIZE = 64


class WindowRuleTask(StateTrajectoryTask):
    """Trajectories of S cells with C colours where cell i of x_{t+1} is a function (the sequence's
    rule, one of a pool of ``rules``) of the window x_t[i-r], ..., x_t[i+r] with a periodic boundary.

    Shared by ``cellular_automata`` (lookup tables) and ``neural_ca`` (small networks): parameter
    checks, the batch size (``batch_size`` or ``tokens_per_batch``), the window ``neighbours``
    [S, 2r+1], the circulant ground truth and generation. Subclasses draw their pool and define
    ``step(state [B, S], rules) -> [B, S]``, where ``rules`` is what ``select_rules`` gives.
    """

    def __init__(self, state_size: int, colors: int, radius: int, rules: int, trajectory_length: int,
                 task_seed: int, batch_size: int | None, tokens_per_batch: int | None):
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

    def select_rules(self, chosen: torch.Tensor):
        """chosen [B] pool indices -> what ``step`` takes as the sequences' rules (default: the indices)."""
        return chosen

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
    ):
        super().__init__(state_size, colors, radius, rules, trajectory_length, task_seed, batch_size,
                         tokens_per_batch)
        width = 2 * radius + 1
        g = seeded_generator(task_seed, "cellular_automata.rules", colors, radius, rules)
        self.tables = torch.randint(0, colors, (rules, colors**width), generator=g)
        self.place = colors ** torch.arange(width - 1, -1, -1)  # [2r+1]: window digit k weighs C**(width-1-k)

    def select_rules(self, chosen: torch.Tensor) -> torch.Tensor:
        return self.tables[chosen]  # [B, C**(2r+1)]

    def step(self, state: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
        """One transition: state [B, S] long, tables [B, C**(2r+1)] long -> next state [B, S] long."""
        index = (state[:, self.neighbours] * self.place).sum(dim=-1)  # [B, S, 2r+1] -> [B, S]
        return tables.gather(1, index)
