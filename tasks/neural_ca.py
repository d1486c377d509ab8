"""Neural cellular automata: 1-D automata whose transition rules are small random networks.

Like ``cellular_automata`` (docs/science.md), but each rule of the pool is a random MLP instead of a uniform
lookup table, which gives structured rules (the first layer adds up one vector per neighbour), the
kind of data proposed for pre-pre-training (docs/science.md, claim 8). Every sequence follows one rule of the
pool, so the rule is inferred in context.

Rule ρ maps the window x_t[i-r], ..., x_t[i+r] (periodic boundary) to cell i of x_{t+1}:

    h      = tanh(onehot(window) · W1[ρ] + b1[ρ])       onehot [(2r+1)·C], W1 [(2r+1)·C, H], h [H]
    x_{t+1}[i] = argmax(h · W2[ρ] + b2[ρ])              W2 [H, C]: quantised to one of C colours

The weights are Gaussian (W1, b1 ~ N(0, 1); W2, b2 ~ N(0, 1/H)), drawn once per task instance from
``task_seed``, independent of ``state_size`` and ``trajectory_length``; computed in float64 so that the
argmax does not depend on the order of a batched sum.
"""

from __future__ import annotations

import torch

from emergence_bench.registry import register_task
from emergence_bench.tasks.base import check_range, seeded_generator
from emergence_bench.tasks.cellular_automata import WindowRuleTask


@register_task("neural_ca")
class NeuralCA(WindowRuleTask):
    """Trajectories [x_0; ...; x_{T-1}] of S cells with C colours, flattened to S·T tokens.

        W1 [rules, (2r+1)·C, H]   b1 [rules, H]   W2 [rules, H, C]   b2 [rules, C]   (float64)
        batch [B, S·T] long       each sequence picks one rule uniformly

    x_0 is uniform and unscored; ground truth, the named patterns (``predict``, ``own``), the Bayes
    oracle (``max_accuracy``, ``floor_loss``) and the count shortcut as in cellular_automata, the
    oracle reading each network as its lookup table (``rule_tables``). ``tokens_per_batch`` works
    as there.
    """

    def __init__(
        self,
        state_size: int = 16,
        colors: int = 4,
        radius: int = 1,
        hidden: int = 16,
        rules: int = 256,
        trajectory_length: int = 16,
        task_seed: int = 0,
        batch_size: int | None = None,
        tokens_per_batch: int | None = None,
    ) -> None:
        check_range("hidden", hidden, 1)
        super().__init__(state_size, colors, radius, rules, trajectory_length, task_seed, batch_size,
                         tokens_per_batch)
        self.hidden = hidden
        width = 2 * radius + 1
        g = seeded_generator(task_seed, "neural_ca.rules", colors, radius, hidden, rules)
        f64 = torch.float64
        self.W1 = torch.randn(rules, width * colors, hidden, generator=g, dtype=f64)
        self.b1 = torch.randn(rules, hidden, generator=g, dtype=f64)
        self.W2 = torch.randn(rules, hidden, colors, generator=g, dtype=f64) / hidden**0.5
        self.b2 = torch.randn(rules, colors, generator=g, dtype=f64) / hidden**0.5

    def step(self, state: torch.Tensor, rule: torch.Tensor) -> torch.Tensor:
        """One transition: state [B, S] long, rule [B] long (pool indices) -> next state [B, S] long."""
        return self.apply_rules(state[:, self.neighbours], rule)

    def apply_rules(self, window: torch.Tensor, rule: torch.Tensor) -> torch.Tensor:
        """window [B, N, 2r+1] long colours, rule [B] long -> [B, N] long: rule[b]'s output for each
        of its N windows. ``step`` and ``rule_tables`` both go through here, so they agree exactly."""
        # One-hot of each neighbour, neighbours side by side: feature k·C + colour.
        index = window + self.colors * torch.arange(window.shape[-1])  # [B, N, 2r+1]
        # onehot · W1 is the sum of W1's rows picked by the window, so gather instead of multiplying.
        W1 = self.W1[rule]  # [B, (2r+1)·C, H]
        picked = W1[torch.arange(window.shape[0])[:, None, None], index]  # [B, N, 2r+1, H]
        h = torch.tanh(picked.sum(dim=2) + self.b1[rule][:, None])  # [B, N, H]
        logits = torch.einsum("bsh,bhc->bsc", h, self.W2[rule]) + self.b2[rule][:, None]  # [B, N, C]
        return logits.argmax(dim=-1)

    def rule_tables(self) -> torch.Tensor:
        """[rules, C**(2r+1)] long: each network rule as a lookup table over window codes (code w
        has digit k = (w // C**(2r-k)) % C, leftmost most significant, as in ``window_index``)."""
        if getattr(self, "_tables", None) is None:
            codes = torch.arange(self.colors ** len(self.place))
            windows = codes[:, None] // self.place % self.colors  # [C**(2r+1), 2r+1]
            chunk = max(1, 2**22 // (windows.numel() * self.hidden))  # rules at a time: bounded memory
            self._tables = torch.cat([
                self.apply_rules(windows.expand(len(rules), -1, -1), rules)
                for rules in torch.arange(self.rules).split(chunk)
            ])
        return self._tables
