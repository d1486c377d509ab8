"""Per-head previous-token and induction scores (claim 2 of docs/science.md: do heads jump from diffuse to these
patterns together with a probe's emergence?).

Both are read from attention probabilities on ``[bos] + r + r``: a random token string r of length T,
repeated (Olsson et al.'s diagnostic). For the query at position i,
- **previous-token**: the mass on position i − 1, averaged over every query after the first;
- **induction**: in the repeat (i ≥ T + 1), the mass on i − T + 1, the token that followed the query's
  token the first time: the position a copying head must read. Averaged over the repeat's queries.
Uniform causal attention gives about 1/i to each, so a diffuse head scores 0.021 (induction) and 0.059
(previous token) at T = 32 (``uniform_scores``); a head that does the pattern scores near 1.

That baseline, and what a half-formed head scores, move with T: ``analyze pythia`` takes T = 32 or
what fits the model's context, so its scores compare models of one context. Models of several
contexts (the pilot's) are scored on one probe of a fixed length, PROBE_LENGTH, that fits the
smallest of them: the same tokens at the same positions for every model, so a difference in score is
the model's. Normalising each T's score against uniform attention was the other way; it corrects the
diffuse baseline only, not the rest of what T changes (a real head is not uniform: it leans on bos or
on the previous token, and the repeat it can copy from grows with T).
"""

from __future__ import annotations

import torch

JUMP = 0.3  # a head "has" a pattern once its score is at least this (diffuse heads stay near 1/i)
PROBE_LENGTH = 15  # the fixed probe's T: 2T + 1 = 31 positions fit every context from 32 up


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


def uniform_scores(length: int) -> dict[str, float]:
    """What a head attending uniformly to every position up to its own scores on ``repeated_tokens`` of
    T = ``length``: the diffuse level, the same at every context for a fixed T."""
    queries = range(1, 2 * length + 1)
    repeat = range(length + 1, 2 * length + 1)
    return {"previous_token": sum(1 / (i + 1) for i in queries) / len(queries),
            "induction": sum(1 / (i + 1) for i in repeat) / len(repeat)}


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
