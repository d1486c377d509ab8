"""The gated delta rule (Gated DeltaNet's core op): a matrix state written with the delta rule and
forgotten through a per-head, data-dependent scalar decay.

Per head, with unit-norm key k_t [K], value v_t [V], write strength beta_t ∈ (0, 1) and log-decay
g_t ≤ 0, the state S_t [V, K] and output o_t [V] are::

    S_t = exp(g_t) · S_{t-1} · (I - beta_t k_t k_tᵀ) + beta_t v_t k_tᵀ
    o_t = scale · S_t q_t

Three forms over the same tensors: ``gated_delta_rule_chunked`` (pure PyTorch, the reference
backend), flash-linear-attention's Triton kernel (``gated_delta_rule_kernel``, CUDA), and the plain
step-by-step loop ``gated_delta_rule_recurrent`` the tests hold both to.
"""

from __future__ import annotations

import torch

from emergence_bench.mixers.ops.chunks import from_chunks, to_chunks
from emergence_bench.mixers.ops.segment_sum import segment_sum
from emergence_bench.mixers.ops.triangular import solve_unit_lower

KERNEL_MODULE = "fla.ops.gated_delta_rule"
L2NORM_EPS = 1e-6  # the epsilon of fla's in-kernel q/k L2 norm, so either path normalises alike


def l2_normalize(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """x [..., K] -> x / sqrt(|x|² + eps) [..., K] (fla's formula: eps inside the root)."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def gated_delta_rule_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                               scale: float | None = None,
                               return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule one step at a time, written as the textbook update (for tests).

    q, k [B, T, H, K], v [B, T, H, V], g (log-decay) and beta [B, T, H] -> o [B, T, H, V], and with
    ``return_state`` the final state too: (o, S [B, H, V, K]).
    The state S starts at zero; ``scale`` defaults to K^-0.5.
    """
    B, T, H, K = q.shape
    scale = K ** -0.5 if scale is None else scale
    eye = torch.eye(K, dtype=q.dtype, device=q.device)
    S = q.new_zeros(B, H, v.shape[-1], K)
    outputs = []
    for t in range(T):
        k_t, v_t, b_t = k[:, t], v[:, t], beta[:, t, :, None, None]  # [B, H, K], [B, H, V], [B, H, 1, 1]
        erase = eye - b_t * k_t[..., :, None] * k_t[..., None, :]  # I - beta k kᵀ  [B, H, K, K]
        write = b_t * v_t[..., :, None] * k_t[..., None, :]  # beta v kᵀ  [B, H, V, K]
        S = g[:, t, :, None, None].exp() * S @ erase + write
        outputs.append(scale * (S @ q[:, t, ..., None]).squeeze(-1))  # [B, H, V]
    o = torch.stack(outputs, dim=1)
    return (o, S) if return_state else o


def gated_delta_rule_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                             scale: float | None = None, chunk_size: int = 32) -> torch.Tensor:
    """The gated delta rule in chunks: parallel (WY/UT form) inside each chunk of C positions,
    a recurrence over the T/C chunk states between them. Same contract as the recurrent form.

    q, k [B, T, H, K], v [B, T, H, V], g (log-decay, ≤ 0) and beta [B, T, H] -> o [B, T, H, V].
    Computes in at least float32 and returns the input dtype. Largest intermediate: [B, H, T, C].
    The default C = 32 measured fastest on CPU at T = 256 (16 and 64 are within ~20 %).

    Derivation, per chunk with start state h [K, V] (= S_0ᵀ) and in-chunk cumulative decay
    G_i = g_1 + … + g_i: the value each step actually writes is u_i = beta_i (v_i - h̃_iᵀ k_i), h̃_i
    being the decayed state before step i. Unrolling h̃_i gives the unit lower-triangular system
    (I + A) u = beta v - beta exp(G) K h, with A_ij = beta_i exp(G_i - G_j) k_i·k_j for j < i; so
    u = U - W h with U = (I + A)⁻¹ beta v and W = (I + A)⁻¹ beta exp(G) K, both independent of h.
    Then o_i = scale (exp(G_i) q_iᵀ h + Σ_{j ≤ i} exp(G_i - G_j) q_i·k_j u_j) and the next chunk
    starts from exp(G_C) h + Σ_j exp(G_C - G_j) k_j u_jᵀ. Every exponent is ≤ 0, so nothing grows.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    out_dtype = v.dtype
    dtype = torch.promote_types(q.dtype, torch.float32)
    C = min(chunk_size, T)
    # [B, H, N, C, K|V], g and beta [B, H, N, C]. Padded steps (g = 0, beta = 0, k = 0) write nothing
    # and come after every real step, so they change no real output.
    q, k, v, g, beta = (to_chunks(x.to(dtype), C) for x in (q, k, v, g, beta))
    q = q * scale
    G = g.cumsum(-1)  # [B, H, N, C] log-decay from the chunk start through step i
    decay = segment_sum(g).exp()  # [i, j] = exp(G_i - G_j) for j ≤ i, exactly 0 above  [B, H, N, C, C]

    # A is zero above its diagonal; the solve reads only below it: (I + A) [U W] = rhs.
    A = beta[..., None] * (k @ k.transpose(-1, -2)) * decay  # [B, H, N, C, C]
    rhs = torch.cat([beta[..., None] * v, (beta * G.exp())[..., None] * k], dim=-1)  # [B, H, N, C, V + K]
    U, W = solve_unit_lower(A, rhs).split([V, K], dim=-1)

    scores = (q @ k.transpose(-1, -2)) * decay  # in-chunk q_i·k_j exp(G_i - G_j), j ≤ i  [B, H, N, C, C]
    q_from_start = q * G.exp()[..., None]  # reads the chunk's start state  [B, H, N, C, K]
    k_to_end = k * decay[..., -1, :, None]  # carries write j to the chunk end, exp(G_C - G_j)  [B, H, N, C, K]
    chunk_decay = G[..., -1].exp()[..., None, None]  # [B, H, N, 1, 1]

    h = q.new_zeros(B, H, K, V)
    outputs = []
    # unbind once: its backward is one stack, where indexing [:, :, n] would zero-fill a full-size
    # gradient per chunk and per tensor.
    per_chunk = (x.unbind(2) for x in (U, W, q_from_start, scores, k_to_end, chunk_decay))
    for U_n, W_n, q_n, scores_n, k_n, decay_n in zip(*per_chunk):  # only the chunk states are sequential
        u = U_n - W_n @ h  # [B, H, C, V]
        outputs.append(q_n @ h + scores_n @ u)
        h = decay_n * h + k_n.transpose(-1, -2) @ u
    return from_chunks(torch.stack(outputs, dim=2), T).to(out_dtype)


def gated_delta_rule_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                            scale: float | None = None) -> torch.Tensor:
    """flash-linear-attention's chunked Triton kernel (CUDA only); same contract as the reference.

    fla takes the [B, T, H, *] layout we use, g as a natural-log decay and beta after the sigmoid, so
    nothing is transposed; q and k arrive normalised, so its in-kernel L2 norm and sigmoid stay off.
    """
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    o, _ = chunk_gated_delta_rule(
        q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=None, output_final_state=False,
        use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
    )
    return o

