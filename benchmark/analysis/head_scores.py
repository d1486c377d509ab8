"""Per-head previous-token and induction scores (claim 2 of docs/science.md: do heads jump from diffuse to these
patterns together with a probe's emergence?).

Both are read from attention probabilities on ``[bos] + r + r``: a random token string r of length T,
repeated (Olsson et al.'s diagnostic). For the query at position i,
- **previous-token**: the mass on position i − 1, averaged over every query after the first;
- **induction**: in the repeat (i ≥ T + 1), the mass on i − T + 1, the token that followed the query's
  token the first time: the position a copying head must read. Averaged over the repeat's queries.
Uniform causal attention gives about 1/i to each, so a diffuse head scores near 0.03 at T = 32; a head
that does the pattern scores near 1.
"""

from __future__ import annotations

import torch

JUMP = 0.3  # a head "has" a pattern once its score is at least this (diffuse heads stay near 1/i)


def repeated_tokens(vocab: list[int], length: int, batch: int, bos: int, seed: int = 0) -> torch.Tensor:
    """[batch, 2·length + 1]: bos, then ``length`` tokens drawn from ``vocab``, then the same again."""
    generator = torch.Generator().manual_seed(seed)
    pool = torch.tensor(vocab)
    r = pool[torch.randint(0, len(pool), (batch, length), generator=generator)]
    return torch.cat([torch.full((batch, 1), bos), r, r], dim=1)


def scores(probs: torch.Tensor, length: int) -> dict[str, torch.Tensor]:
    """probs [B, H, L, L] on ``repeated_tokens`` (L = 2·length + 1) -> {"previous_token": [H],
    "induction": [H]}, each averaged over the batch and its queries."""
    if probs.shape[-1] != 2 * length + 1:
        raise ValueError(f"attention over {probs.shape[-1]} positions is not a repeat of length {length}")
    queries = torch.arange(1, 2 * length + 1)
    previous = probs[:, :, queries, queries - 1].mean(dim=(0, 2))
    repeat = torch.arange(length + 1, 2 * length + 1)
    induction = probs[:, :, repeat, repeat - length + 1].mean(dim=(0, 2))
    return {"previous_token": previous, "induction": induction}


def jump_step(history: list[tuple[int, list[list[float]]]], threshold: float = JUMP) -> dict:
    """The first step at which some head's score reaches ``threshold``, and the heads that have by then.

    ``history``: [(step, score [layers][heads])] in step order. Returns {"step", "heads": [[layer, head]],
    "max": the best score at that step} (step None when no head ever reaches it)."""
    for step, grid in history:
        heads = [[layer, head] for layer, row in enumerate(grid)
                 for head, value in enumerate(row) if value >= threshold]
        if heads:
            return {"step": step, "heads": heads, "max": max(max(row) for row in grid)}
    return {"step": None, "heads": [], "max": max((max(max(r) for r in g) for _, g in history), default=None)}
