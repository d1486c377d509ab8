"""Cutting a sequence into equal chunks for the chunk-parallel recurrences (and putting it back).

The chunked forms run a recurrence inside chunks of C steps in parallel and only between chunks in
sequence. The last chunk is zero-padded at the end of time: each chunked op says why its zero steps
change no real output (they come after every real step, and a zero step writes nothing).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def to_chunks(x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """x [B, T, H, *] -> [B, H, N, C, *] with C = chunk_size and N = ⌈T / C⌉, zero-padded at the end
    of time (``*`` may be empty: per-head scalars such as gates). A view, laid out [B, N, C, H, *] in
    memory (a batched matmul reads it as it is)."""
    B, T, H = x.shape[:3]
    pad = -T % chunk_size
    x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, 0, 0, pad))  # [B, T + pad, H, *]
    return x.view(B, (T + pad) // chunk_size, chunk_size, H, *x.shape[3:]).movedim(3, 1)


def from_chunks(x: torch.Tensor, length: int) -> torch.Tensor:
    """x [B, H, N, C, *] -> [B, T, H, *] with T = length ≤ N·C: the padding dropped."""
    return x.flatten(2, 3)[:, :, :length].movedim(1, 2)
