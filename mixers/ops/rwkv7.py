"""RWKV-7's core op: a per-channel-decayed state updated by a generalised delta rule.

Per head, with the state S [V, K] oriented as in the official ``rwkv`` package::

    S_t   = S_{t-1} (diag(exp(w_t)) + a_t b_t^T) + v_t k_t^T
    out_t = S_t q_t

Three forms over the same tensors: ``rwkv7_chunked`` (pure PyTorch, chunked WY form, the reference
backend), flash-linear-attention's Triton kernel (``rwkv7_kernel``, CUDA), and the plain
step-by-step loop ``rwkv7_recurrent`` the tests hold the chunked form to.
"""

from __future__ import annotations

import torch

from emergence_bench.mixers.ops.chunks import from_chunks, to_chunks
from emergence_bench.mixers.ops.triangular import solve_unit_lower

KERNEL_MODULE = "fla.ops.rwkv7"


def rwkv7_recurrent(q: torch.Tensor, log_w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                    b: torch.Tensor, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The generalised delta rule, one step at a time (the tests' ground truth for the chunked form).

    q, log_w, k, a, b: [B, T, H, K]; v: [B, T, H, V]; initial_state: [B, H, V, K] or None.
    Returns out [B, T, H, V] and the final state [B, H, V, K], where per step
    ``S = S * exp(log_w)[None, :] + (S @ a) b^T + v k^T`` and ``out = S @ q``.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(B, H, V, K) if initial_state is None else initial_state
    outs = []
    for t in range(T):
        removed = (S @ a[:, t, :, :, None]) @ b[:, t, :, None, :]  # [B, H, V, K]
        written = v[:, t, :, :, None] @ k[:, t, :, None, :]  # [B, H, V, K]
        S = S * log_w[:, t, :, None, :].exp() + removed + written
        outs.append((S @ q[:, t, :, :, None]).squeeze(-1))  # [B, H, V]
    return torch.stack(outs, dim=1), S


def rwkv7_chunked(q: torch.Tensor, log_w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                  b: torch.Tensor, chunk_size: int = 16) -> torch.Tensor:
    """The generalised delta rule of ``rwkv7_recurrent`` from a zero state, chunk-parallel in time.

    q, log_w, k, a, b: [B, T, H, K]; v: [B, T, H, V] -> out [B, T, H, V], in float32 (float64 when
    given float64) whatever the input dtype.

    Within a chunk of C steps the state's effect is linear, so the "removal" reads u_t = S_{t-1} a_t
    solve one unit-lower-triangular C×C system (the WY form), and the chunk collapses to an affine map
    of its start state: H_end = M H_start + N, out = P H_start + O0 (H = S^T, [K, V]). Only that
    small affine recurrence runs sequentially, over T / C chunks.

    Decay ratios inside a chunk are factored as exp(G_t) * exp(-G_s) with G the cumulative log decay
    from the chunk start, so exp(-G) reaches exp(C * max|log_w|): about e^9.7 for RWKV-7's bound
    |log_w| ≤ exp(-0.5) at C = 16, far from float32 overflow. Much stronger decays need a smaller C.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    C = chunk_size
    # [B, H, n, C, K|V]; a zero padding step is a no-op (decay 1, no write) after every real step.
    q, log_w, k, v, a, b = (to_chunks(x.to(dtype), C) for x in (q, log_w, k, v, a, b))
    n = q.shape[2]
    G = log_w.cumsum(dim=-2)  # [B, H, n, C, K]: log decay from the chunk start through step t
    G_end = G[..., -1:, :]  # [B, H, n, 1, K]
    q_in = q * G.exp()  # queries read the state decayed through their own step
    a_in = a * (G - log_w).exp()  # removals read the state before their step's decay
    k_out, b_out = k * (-G).exp(), b * (-G).exp()  # writes, undone back to the chunk start

    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()  # s ≤ t
    strict = lower.tril(-1)  # s < t
    A_qk = (q_in @ k_out.transpose(-1, -2)).masked_fill(~lower, 0)  # [B, H, n, C, C]
    A_qb = (q_in @ b_out.transpose(-1, -2)).masked_fill(~lower, 0)
    A_ak = (a_in @ k_out.transpose(-1, -2)).masked_fill(~strict, 0)
    A_ab = (a_in @ b_out.transpose(-1, -2)).masked_fill(~strict, 0)

    # u = a_in H_start + A_ak v + A_ab u  =>  u = W H_start + U0, with (I - A_ab) [W | U0] = [a_in | A_ak v].
    W_U0 = solve_unit_lower(-A_ab, torch.cat([a_in, A_ak @ v], dim=-1))
    W, U0 = W_U0.split([K, V], dim=-1)  # [.., C, K], [.., C, V]

    P = q_in + A_qb @ W  # [.., C, K]: how the outputs read the chunk's start state
    O0 = A_qb @ U0 + A_qk @ v  # [.., C, V]: the outputs from a zero start state
    k_end, b_end = k * (G_end - G).exp(), b * (G_end - G).exp()  # writes, decayed to the chunk end
    M = torch.diag_embed(G_end.squeeze(-2).exp()) + b_end.transpose(-1, -2) @ W  # [.., K, K]
    N = b_end.transpose(-1, -2) @ U0 + k_end.transpose(-1, -2) @ v  # [.., K, V]

    state = q.new_zeros(B, H, K, V)
    starts = []
    for i in range(n):
        starts.append(state)
        state = M[:, :, i] @ state + N[:, :, i]
    out = P @ torch.stack(starts, dim=2) + O0  # [B, H, n, C, V]
    return from_chunks(out, T)


def rwkv7_kernel(q: torch.Tensor, log_w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                 b: torch.Tensor) -> torch.Tensor:
    """The same op through flash-linear-attention's chunked Triton kernel (CUDA only).

    All tensors [B, T, H, ·], fla's own layout; ``scale=1`` because RWKV-7 does not scale r·k, and the
    log-decay bound licenses fla's faster tensor-core path (it is slightly looser than exp(-0.5) so
    float32 rounding of exp(-0.5) * sigmoid(·) stays inside it).
    """
    from fla.ops.rwkv7 import chunk_rwkv7

    out, _ = chunk_rwkv7(r=q, w=log_w, k=k, v=v, a=a, b=b, scale=1.0, initial_state=None,
                         output_final_state=False, lower_bound=-0.607)
    return out

