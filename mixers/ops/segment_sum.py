"""The segment-sum decay matrix of a chunked or quadratic linear recurrence.

For per-step log-decays x_1 .. x_T, entry [i, j] is the log of the decay from step j to step i::

    segment_sum(x)[..., i, j] = x_{j+1} + … + x_i    (j ≤ i; 0 on the diagonal)
                              = -inf                  (j > i: the future, so exp() gives an exact 0)

Each segment is summed on its own (a cumulative sum down the rows of a masked copy of x), not taken
as the difference of two cumulative sums G_i - G_j: that difference loses float32 precision once
|G| is large (a fast-forgetting head reaches G ~ -1e3 inside a chunk, where float32's step is ~1e-4).
"""

from __future__ import annotations

import torch


def segment_sum(x: torch.Tensor) -> torch.Tensor:
    """x [..., T] (log-decays) -> [..., T, T]: [i, j] = Σ_{j<m≤i} x_m for j ≤ i, -inf above the diagonal.
    Memory: one [..., T, T] tensor (and its cumulative sum)."""
    T = x.shape[-1]
    lower = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # [i, j]: j ≤ i
    # steps[m, j] = x_m for m > j, so the cumulative sum down the rows gives the segment [i, j].
    steps = x[..., :, None].expand(*x.shape, T).masked_fill(~lower.tril(-1), 0)  # [..., T, T]
    return steps.cumsum(-2).masked_fill(~lower, float("-inf"))
