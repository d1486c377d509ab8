"""The first-order linear recurrence h_t = a_t h_{t-1} + b_t, chunk-parallel over time, and its
transpose (the forward scan's adjoint, which the selective scan's backward runs).

Time is the leading dim: a, b, h [L, *S], any trailing shape S. No autograd: callers that need a
gradient write their backward with the transpose scan (``selective_scan`` does).
"""

from __future__ import annotations

import math

import torch


def _scan_into(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, transpose: bool) -> None:
    """Writes into out [L, *S] the scan of a, b [L, *S] along dim 0 (no autograd):

    forward   (transpose=False): out_t = a_t out_{t-1} + b_t, out_{-1} = 0;
    transpose (transpose=True):  out_t = a_{t+1} out_{t+1} + b_t, out_L = 0 (a_0 is never read).

    The transpose is the forward scan's adjoint, so the backward needs no time-reversed copies.
    ``out`` may be ``b`` itself (each row of b is read before, or exactly when, it is overwritten).

    Chunked reduce-then-scan: time is cut into nc chunks of T ≈ √L steps. Sweep 1 runs every chunk
    at once from a zero state, keeping only each chunk's final state and the product of its decays;
    a short loop over chunks turns those into the true state entering each chunk; sweep 2 reruns
    the chunks from their true entering states, writing every step. That is about 4√L
    tensor-wide steps, reading a and b twice and writing out once, and it only ever multiplies
    decays (all ≤ 1 for Mamba), so nothing can overflow. Time is the leading dim, so each step is a
    slab of whole rows. The L - nc·T leftover steps (fewer than T) run one by one.
    """
    L = a.shape[0]
    T = max(1, math.isqrt(L))  # chunk length
    nc = L // T
    m = nc * T
    if not transpose:
        a_, b_, h_ = (t[:m].unflatten(0, (nc, T)) for t in (a, b, out))  # [nc, T, *S]
        # Sweep 1, chunks 0..nc-2 (the last one's final state is never needed).
        final = b_[:-1, 0].clone()  # state at the chunk's end, from a zero entering state
        decay = a_[:-1, 0].clone()  # product of the chunk's decays
        for t in range(1, T):
            torch.addcmul(b_[:-1, t], a_[:-1, t], final, out=final)
            decay.mul_(a_[:-1, t])
        for c in range(1, nc - 1):  # true final state of chunk c = state entering chunk c + 1
            final[c].addcmul_(decay[c], final[c - 1])
        # Sweep 2.
        h_[0, 0].copy_(b_[0, 0])
        torch.addcmul(b_[1:, 0], a_[1:, 0], final, out=h_[1:, 0])
        for t in range(1, T):
            torch.addcmul(b_[:, t], a_[:, t], h_[:, t - 1], out=h_[:, t])
        for t in range(m, L):
            torch.addcmul(b[t], a[t], out[t - 1], out=out[t])
    else:
        r = L - m  # the chunks cover the last m steps; the first r run one by one at the end
        a_, b_, g_ = (t[r:].unflatten(0, (nc, T)) for t in (a, b, out))  # [nc, T, *S]
        # Sweep 1, chunks 1..nc-1 (row j is chunk j + 1; chunk 0's first state is never needed).
        first = b_[1:, -1].clone()  # value at the chunk's first step, from zero after its end
        decay = torch.ones_like(first)  # a over the chunk's steps 1..T-1
        for t in range(T - 2, -1, -1):
            torch.addcmul(b_[1:, t], a_[1:, t + 1], first, out=first)
            decay.mul_(a_[1:, t + 1])
        for c in range(nc - 2, 0, -1):  # true first value of chunk c, linked to chunk c+1's by a
            first[c - 1].addcmul_(decay[c - 1] * a_[c + 1, 0], first[c])
        # Sweep 2.
        g_[-1, -1].copy_(b_[-1, -1])
        torch.addcmul(b_[:-1, -1], a_[1:, 0], first, out=g_[:-1, -1])
        for t in range(T - 2, -1, -1):
            torch.addcmul(b_[:, t], a_[:, t + 1], g_[:, t + 1], out=g_[:, t])
        for t in range(r - 1, -1, -1):
            torch.addcmul(b[t], a[t + 1], out[t + 1], out=out[t])


def linear_scan(a: torch.Tensor, b: torch.Tensor, transpose: bool = False,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """a, b [L, *S] -> h [L, *S] (see ``_scan_into``); no autograd. ``out`` may be ``b`` itself."""
    out = torch.empty_like(b, memory_format=torch.contiguous_format) if out is None else out
    _scan_into(a, b, out, transpose)
    return out
