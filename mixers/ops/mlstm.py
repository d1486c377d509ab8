"""The mLSTM cell (xLSTM's matrix-memory LSTM) over a whole sequence: the stabilised parallel
(quadratic) form, the stabilised chunkwise form (quadratic only within chunks), the step-by-step
recurrence the tests hold both to, and mlstm-kernels' chunkwise Triton kernel.

Per head, with query q_t and key k_t [K], value v_t [V], log input gate ĩ_t and log forget gate
log f_t, the memory C_t [V, K], normaliser n_t [K] and output h_t [V] are::

    C_t = f_t C_{t-1} + exp(ĩ_t) v_t k_tᵀ
    n_t = f_t n_{t-1} + exp(ĩ_t) k_t
    h_t = C_t q̂_t / max(|n_tᵀ q̂_t|, 1)          q̂_t = q_t / √K

Every form carries the max-stabiliser m_t = max(log f_t + m_{t-1}, ĩ_t) and stores C and n scaled by
exp(-m_t) (exp(ĩ) overflows for ĩ > 88 in float32); h_t does not depend on m except through ``eps``,
the guard added to the stabilised denominator (as xLSTM and mlstm-kernels add it). mlstm-kernels
ships under the NXAI Community License (not an OSI licence): an optional extra only.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from emergence_bench.mixers.ops.segment_sum import segment_sum

KERNEL_MODULE = "mlstm_kernels.torch.chunkwise.triton_xl_chunk"
EPS = 1e-6  # the denominator guard of xLSTM's and mlstm-kernels' mLSTM


def mlstm_parallel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_i: torch.Tensor, log_f: torch.Tensor,
                   eps: float = EPS) -> torch.Tensor:
    """The mLSTM over a whole sequence at once, in the stabilised parallel (quadratic) form.

    q, k [B, T, H, K], v [B, T, H, V], log_i (= ĩ) and log_f (= log f) [B, T, H] -> h [B, T, H, V],
    in v's dtype, computed in at least float32. Memory: a few [B, H, T, T] tensors.

    Unrolling the recurrence from zero, h_t = Σ_{s≤t} w_ts (q̂_t·k_s) v_s / max(|Σ_s w_ts q̂_t·k_s|, 1)
    with w_ts = exp(log f_{s+1} + … + log f_t + ĩ_s). Each row is stabilised by its largest log
    weight m_t (the recurrent m_t), so every exp(log w_ts - m_t) is ≤ 1.
    """
    B, T, H, K = q.shape
    out_dtype = v.dtype
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # [B, H, T, *]
    log_i, log_f = (x.to(dtype).transpose(1, 2) for x in (log_i, log_f))  # [B, H, T]
    log_w = segment_sum(log_f) + log_i[..., None, :]  # [t, s] = log w_ts, -inf for s > t  [B, H, T, T]
    m = log_w.amax(-1, keepdim=True)  # [B, H, T, 1]: the diagonal is finite, so m is
    scores = (q @ k.transpose(-1, -2)) * K ** -0.5 * (log_w - m).exp()  # [B, H, T, T]
    normaliser = torch.maximum(scores.sum(-1, keepdim=True).abs(), (-m).exp()) + eps  # [B, H, T, 1]
    h = (scores / normaliser) @ v  # [B, H, T, V]
    return h.transpose(1, 2).to(out_dtype)


def mlstm_chunkwise(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_i: torch.Tensor, log_f: torch.Tensor,
                    eps: float = EPS, chunk_size: int = 64) -> torch.Tensor:
    """The mLSTM in the stabilised chunkwise form: the parallel form inside chunks of ``chunk_size``
    steps, the recurrence between them. Same contract as ``mlstm_parallel``; memory: a few
    [B, H, chunk, chunk] tensors and one state (C [B, H, V, K], n [B, H, K], m [B, H]) per chunk, so
    the cost grows as T · chunk instead of T².

    Within a chunk, b_t = Σ log f from the chunk's first step to t weighs the state that entered it
    (stored scaled by exp(-m_prev)); each row is stabilised by its largest log weight over the
    entering state and the chunk's own steps, which is the recurrent m_t, so rows equal the parallel
    form's up to summation order. A last chunk may be shorter: nothing is padded.
    """
    B, T, H, K = q.shape
    out_dtype = v.dtype
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # [B, H, T, *]
    log_i, log_f = (x.to(dtype).transpose(1, 2) for x in (log_i, log_f))  # [B, H, T]
    q = q * K ** -0.5
    state = None  # (C, n, m) entering the chunk: C and n scaled by exp(-m)
    outputs = []
    for start in range(0, T, chunk_size):
        span = slice(start, start + chunk_size)
        qc, kc, vc, ic, fc = q[:, :, span], k[:, :, span], v[:, :, span], log_i[..., span], log_f[..., span]
        log_w = segment_sum(fc) + ic[..., None, :]  # [t, s] = log w_ts within the chunk  [B, H, c, c]
        m = log_w.amax(-1)  # [B, H, c]: the diagonal is finite
        if state is not None:
            C, n, m_prev = state
            carried = fc.cumsum(-1) + m_prev[..., None]  # log weight of the entering state at t  [B, H, c]
            m = torch.maximum(carried, m)
        scores = (qc @ kc.transpose(-1, -2)) * (log_w - m[..., None]).exp()  # [B, H, c, c]
        numerator, denominator = scores @ vc, scores.sum(-1)  # [B, H, c, V], [B, H, c]
        if state is not None:
            carry = (carried - m).exp()  # [B, H, c], ≤ 1
            numerator = numerator + carry[..., None] * (qc @ C.transpose(-1, -2))
            denominator = denominator + carry * (qc @ n[..., None]).squeeze(-1)
        outputs.append(numerator / (torch.maximum(denominator.abs(), (-m).exp()) + eps)[..., None])
        if start + chunk_size < T:  # the state entering the next chunk: the chunk's last row
            to_end = log_w[..., -1, :]  # [B, H, c]: log weight of step s in the chunk's last state
            m_end = to_end.amax(-1) if state is None else torch.maximum(carried[..., -1], to_end.amax(-1))
            weight = (to_end - m_end[..., None]).exp()[..., None]  # [B, H, c, 1]
            C_end, n_end = (vc * weight).transpose(-1, -2) @ kc, (kc * weight).sum(-2)  # [B, H, V, K], [B, H, K]
            if state is not None:
                kept = (carried[..., -1] - m_end).exp()  # [B, H]
                C_end, n_end = C_end + kept[..., None, None] * C, n_end + kept[..., None] * n
            state = (C_end, n_end, m_end)
    h = torch.cat(outputs, dim=2)  # [B, H, T, V]
    return h.transpose(1, 2).to(out_dtype)


def mlstm_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_i: torch.Tensor, log_f: torch.Tensor,
                    eps: float = EPS, return_state: bool = False) -> Any:
    """The mLSTM one step at a time, straight from the equations (for tests). Shapes as
    ``mlstm_parallel``; the stabiliser starts at m_0 = -inf (nothing stored yet), so m_t is the
    parallel form's row maximum and even ``eps`` acts alike in both. With ``return_state``, also the
    final state: (h, (C [B, H, V, K], n [B, H, K], m [B, H]))."""
    B, T, H, K = q.shape
    out_dtype = v.dtype
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k, v, log_i, log_f = (x.to(dtype) for x in (q, k, v, log_i, log_f))
    C = q.new_zeros(B, H, v.shape[-1], K)  # exp(-m) · memory
    n = q.new_zeros(B, H, K)  # exp(-m) · normaliser
    m = q.new_full((B, H), float("-inf"))
    outputs = []
    for t in range(T):
        m_new = torch.maximum(log_f[:, t] + m, log_i[:, t])  # [B, H]
        f, i = (log_f[:, t] + m - m_new).exp(), (log_i[:, t] - m_new).exp()  # stabilised gates  [B, H]
        k_t, v_t, q_t = k[:, t], v[:, t], q[:, t] * K ** -0.5  # [B, H, K|V]
        C = f[..., None, None] * C + i[..., None, None] * v_t[..., :, None] * k_t[..., None, :]
        n = f[..., None] * n + i[..., None] * k_t
        denominator = torch.maximum((n * q_t).sum(-1).abs(), (-m_new).exp()) + eps  # [B, H]
        outputs.append((C @ q_t[..., None]).squeeze(-1) / denominator[..., None])  # [B, H, V]
        m = m_new
    h = torch.stack(outputs, dim=1).to(out_dtype)
    return (h, (C, n, m)) if return_state else h


def _kernel_length(T: int) -> int:
    """The sequence length mlstm-kernels' xl_chunk kernel takes: 16, 32 or 64, or a multiple of 128."""
    if T > 64:
        return -(-T // 128) * 128
    return max(16, 1 << (T - 1).bit_length())


def _kernel_width(d: int) -> int:
    """A head size the kernel's tensor-core tiles take: a power of two, at least 16."""
    return max(16, 1 << (d - 1).bit_length())


def mlstm_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, i_pre: torch.Tensor, f_pre: torch.Tensor,
                 eps: float = EPS) -> torch.Tensor:
    """mlstm-kernels' chunkwise Triton kernel (CUDA only), for the sigmoid forget gate: it takes the
    gate pre-activations ĩ and f̃ (applying logsigmoid to f̃ itself). Same contract as
    ``mlstm_parallel`` otherwise: q, k [B, T, H, K], v [B, T, H, V], i_pre, f_pre [B, T, H] -> h
    [B, T, H, V], computed in float32.

    The kernel wants [B, H, T, *] with T a length of ``_kernel_length`` and head sizes of
    ``_kernel_width``: T is zero-padded at the end (causal: steps after the last change no earlier
    output) and K, V with zero features (q·k and the read-out are unchanged). The kernel scales q·k
    by its own K_pad^-0.5, so q is first multiplied by (K_pad / K)^0.5 to give our K^-0.5.
    """
    from mlstm_kernels.torch.chunkwise.triton_xl_chunk import mlstm_chunkwise__xl_chunk

    B, T, H, K = q.shape
    V = v.shape[-1]
    pad_t, pad_k, pad_v = _kernel_length(T) - T, _kernel_width(K) - K, _kernel_width(V) - V
    q = q * math.sqrt((K + pad_k) / K)

    def layout(x: torch.Tensor, pad_features: int) -> torch.Tensor:  # [B, T, H, d] -> [B, H, T', d']
        return F.pad(x.float(), (0, pad_features, 0, 0, 0, pad_t)).transpose(1, 2).contiguous()

    def gate(x: torch.Tensor) -> torch.Tensor:  # [B, T, H] -> [B, H, T']
        return F.pad(x.float(), (0, 0, 0, pad_t)).transpose(1, 2).contiguous()

    h = mlstm_chunkwise__xl_chunk(
        q=layout(q, pad_k), k=layout(k, pad_k), v=layout(v, pad_v), i=gate(i_pre), f=gate(f_pre),
        eps=eps, return_last_states=False, autocast_kernel_dtype=torch.float32,
    )  # [B, H, T', V']
    return h.transpose(1, 2)[:, :T, :, :V].to(v.dtype)
