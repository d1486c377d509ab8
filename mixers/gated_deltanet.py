"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, 2024): a linear RNN whose matrix state is written with
the delta rule and forgets through a per-head, data-dependent scalar decay.

Per head, with unit-norm key k_t [K], value v_t [V], write strength beta_t ∈ (0, 1) and log-decay
g_t ≤ 0, the state S_t [V, K] and output o_t [V] are::

    S_t = exp(g_t) · S_{t-1} · (I - beta_t k_t k_tᵀ) + beta_t v_t k_tᵀ
    o_t = scale · S_t q_t

The core op has two backends over the same tensors (so a checkpoint moves between them):
flash-linear-attention's ``chunk_gated_delta_rule`` Triton kernel on CUDA, and the pure-PyTorch
``gated_delta_rule_chunked`` below (WY/UT form inside chunks, a recurrence across chunks).
``gated_delta_rule_recurrent`` is the plain step-by-step loop the tests check both against.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.registry import register_mixer
from emergence_bench.mixers.backend import KERNEL, REFERENCE, choose
from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.init import WeightInit

KERNEL_MODULE = "fla.ops.gated_delta_rule"
L2NORM_EPS = 1e-6  # the epsilon of fla's in-kernel q/k L2 norm, so either path normalises alike


def l2_normalize(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """x [..., K] -> x / sqrt(|x|² + eps) [..., K] (fla's formula: eps inside the root)."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def gated_delta_rule_recurrent(q, k, v, g, beta, scale: float | None = None, return_state: bool = False):
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


def gated_delta_rule_chunked(q, k, v, g, beta, scale: float | None = None, chunk_size: int = 32) -> torch.Tensor:
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
    pad = (-T) % C
    N = (T + pad) // C

    def chunks(x: torch.Tensor) -> torch.Tensor:
        """[B, T, H, *] -> [B, H, N, C, *]; padded steps (g = 0, beta = 0, k = 0) write nothing and
        come after every real step, so they change no real output."""
        x = x.to(dtype).movedim(1, 2)  # [B, H, T, *]
        if pad:
            x = F.pad(x, (0, 0, 0, pad)) if x.dim() == 4 else F.pad(x, (0, pad))
        return x.reshape(B, H, N, C, *x.shape[3:])

    q, k, v, g, beta = map(chunks, (q, k, v, g, beta))  # [B, H, N, C, K|V], g and beta [B, H, N, C]
    q = q * scale
    G = g.cumsum(-1)  # [B, H, N, C] log-decay from the chunk start through step i
    # decay[i, j] = exp(G_i - G_j) = exp(g_{j+1} + … + g_i) for j ≤ i, else 0. Summing each segment
    # directly, rather than subtracting two cumulative sums, keeps it accurate when |G| is large (a
    # fast-forgetting head reaches G ~ -1e3 inside a chunk, where float32's step is ~1e-4).
    ones = torch.ones(C, C, dtype=torch.bool, device=q.device)
    # steps[m, j] = g_m for m > j, so a cumulative sum down the rows gives segments[i, j] = Σ_{j<m≤i} g_m.
    steps = g[..., :, None].expand(*g.shape, C).masked_fill(~ones.tril(-1), 0)  # [B, H, N, C, C]
    # Mask above the diagonal with -inf before exp, so those entries are exact zeros.
    decay = steps.cumsum(-2).masked_fill(~ones.tril(), float("-inf")).exp()  # [B, H, N, C, C]

    # A below its diagonal (zero above it); unitriangular=True reads only that part and takes the
    # diagonal as 1, so this solves (I + A) [U W] = rhs without forming I + A.
    A = beta[..., None] * (k @ k.transpose(-1, -2)) * decay  # [B, H, N, C, C]
    rhs = torch.cat([beta[..., None] * v, (beta * G.exp())[..., None] * k], dim=-1)  # [B, H, N, C, V + K]
    U, W = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True).split([V, K], dim=-1)

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
    o = torch.stack(outputs, dim=2).reshape(B, H, N * C, V)[:, :, :T]
    return o.movedim(1, 2).to(out_dtype)


def gated_delta_rule_kernel(q, k, v, g, beta, scale: float | None = None) -> torch.Tensor:
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


@register_mixer("gated_deltanet")
class GatedDeltaNet(TokenMixer):
    """Gated DeltaNet token mixer, laid out as flash-linear-attention's ``GatedDeltaNet`` layer.

    ``n_heads`` heads of key size ``head_dim`` and value size ``head_dim * expand_v``; each of q, k, v
    passes a depthwise causal convolution of width ``conv_size`` and a SiLU. The output goes through
    a per-head RMSNorm gated by SiLU(g_proj(x)), then back to d_model.

    Shapes: x [B, L, D] -> q, k [B, L, H, K], v [B, L, H, V], g, beta [B, L, H] -> o [B, L, H, V]
    -> out [B, L, D], with K = head_dim and V = head_dim * expand_v.
    """

    exposes_attention = False
    backends = (REFERENCE, KERNEL)

    def __init__(self, d_model: int, max_len: int, layer_idx: int, n_heads: int = 4, head_dim: int = 16,
                 expand_v: float = 2, conv_size: int = 4):
        super().__init__(d_model, max_len, layer_idx)
        if n_heads < 1 or head_dim < 1:
            raise ValueError(f"n_heads and head_dim must be ≥ 1, got n_heads={n_heads}, head_dim={head_dim}")
        head_v_dim = head_dim * expand_v
        if expand_v <= 0 or head_v_dim != int(head_v_dim):
            raise ValueError(f"expand_v must be > 0 with head_dim * expand_v a whole number, got "
                             f"expand_v={expand_v} (head_dim={head_dim})")
        if conv_size < 1:
            raise ValueError(f"conv_size must be ≥ 1, got {conv_size}")
        self.n_heads, self.head_dim, self.head_v_dim = n_heads, head_dim, int(head_v_dim)
        self.conv_size = conv_size
        key_dim, value_dim = n_heads * head_dim, n_heads * self.head_v_dim

        self.q_proj = nn.Linear(d_model, key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, value_dim, bias=False)
        # Depthwise: one length-conv_size filter per channel, left-padded in forward so it is causal.
        self.q_conv1d = nn.Conv1d(key_dim, key_dim, conv_size, groups=key_dim, bias=False)
        self.k_conv1d = nn.Conv1d(key_dim, key_dim, conv_size, groups=key_dim, bias=False)
        self.v_conv1d = nn.Conv1d(value_dim, value_dim, conv_size, groups=value_dim, bias=False)
        self.a_proj = nn.Linear(d_model, n_heads, bias=False)  # decay input, per head
        self.b_proj = nn.Linear(d_model, n_heads, bias=False)  # write strength, per head
        self.A_log = nn.Parameter(torch.empty(n_heads))
        self.dt_bias = nn.Parameter(torch.empty(n_heads))
        self.g_proj = nn.Linear(d_model, value_dim, bias=False)  # output gate
        self.o_norm_weight = nn.Parameter(torch.ones(self.head_v_dim))
        self.o_norm_eps = 1e-5
        self.o_proj = nn.Linear(value_dim, d_model, bias=False)
        self.last_backend = REFERENCE
        self.reset_decay_parameters()

    def state_size(self, length: int) -> int:
        """The per-head state S [H, V, K] and the q, k, v convs' last conv_size - 1 inputs
        [2·H·K + H·V, conv_size - 1]; no length."""
        H, K, V = self.n_heads, self.head_dim, self.head_v_dim
        return H * V * K + (2 * H * K + H * V) * (self.conv_size - 1)

    def init_weights(self, init: WeightInit) -> None:
        """The projections follow the model's named init; the short convolutions keep PyTorch's and
        the decay parameters their Mamba-2 init (``reset_decay_parameters``)."""
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.a_proj, self.b_proj, self.g_proj, self.o_proj):
            init.linear_(proj)

    @torch.no_grad()
    def reset_decay_parameters(self) -> None:
        """Mamba-2's decay init, as fla uses it: rates A ~ U(0, 16) (A_log = log A) and step sizes
        dt log-uniform in [1e-3, 0.1] (floored at 1e-4), stored as softplus⁻¹(dt) so that at a zero
        input the decay per step is exp(-A·dt): a spread of memory lengths across heads."""
        self.A_log.copy_(torch.empty(self.n_heads).uniform_(0, 16).log())
        dt_min, dt_max, dt_floor = 1e-3, 0.1, 1e-4
        log_dt = torch.rand(self.n_heads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        dt = log_dt.exp().clamp(min=dt_floor)
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt), stable for small dt
        # A hint for optimisers that group parameters (fla does the same); decay should not shrink them.
        self.A_log._no_weight_decay = True
        self.dt_bias._no_weight_decay = True

    @property
    def backend(self) -> str:
        """The backend the last forward ran on ("reference" before any forward)."""
        return self.last_backend

    def _short_conv(self, x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
        """x [B, L, C] -> SiLU(causal depthwise conv(x)) [B, L, C]."""
        x = F.pad(x.transpose(1, 2), (self.conv_size - 1, 0))  # [B, C, conv_size - 1 + L]
        return F.silu(conv(x)).transpose(1, 2)

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        B, L, _ = x.shape
        H, K, V = self.n_heads, self.head_dim, self.head_v_dim
        q = l2_normalize(self._short_conv(self.q_proj(x), self.q_conv1d).view(B, L, H, K))
        k = l2_normalize(self._short_conv(self.k_proj(x), self.k_conv1d).view(B, L, H, K))
        v = self._short_conv(self.v_proj(x), self.v_conv1d).view(B, L, H, V)
        beta = torch.sigmoid(self.b_proj(x))  # [B, L, H]
        g = -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)  # log-decay ≤ 0  [B, L, H]

        self.last_backend = choose(x, KERNEL_MODULE)
        core = gated_delta_rule_kernel if self.last_backend == KERNEL else gated_delta_rule_chunked
        o = core(q, k, v, g, beta, scale=K ** -0.5)  # [B, L, H, V]

        # Gated RMSNorm per head: normalise, scale, then gate.
        o = o * torch.rsqrt(o.square().mean(-1, keepdim=True) + self.o_norm_eps) * self.o_norm_weight
        o = o * F.silu(self.g_proj(x).view(B, L, H, V))
        return self.o_proj(o.reshape(B, L, H * V))
