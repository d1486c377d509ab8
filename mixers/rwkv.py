"""RWKV-7 ("Goose") time mixing: a per-channel-decayed state updated by a generalised delta rule.

Per head (head size N), with the state S [N_v, N_k] oriented as in the official ``rwkv`` package::

    S_t   = S_{t-1} (diag(exp(w_t)) + a_t b_t^T) + v_t k_t^T      a = -kk, b = kk * iclr
    out_t = S_t r_t

``w_t`` is the log decay, in [-exp(-0.5), 0) (a decay in (0.545, 1]); ``kk`` is the L2-normalised
"removal key" and ``iclr`` ∈ (0, 1) the in-context learning rate, so ``S (I - kk (kk*iclr)^T)``
partly erases what the state stored along kk before the new value is written.

The core op has two backends with the same parameters: flash-linear-attention's chunked Triton kernel
(``fla.ops.rwkv7.chunk_rwkv7``) on CUDA, and ``rwkv7_chunked`` below (pure PyTorch, chunked WY form).
``rwkv7_recurrent`` is the plain step-by-step loop the tests hold the chunked form to.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.registry import register_mixer
from emergence_bench.mixers import backend as backends
from emergence_bench.mixers.base import MixerContext, TokenMixer

KERNEL_MODULE = "fla.ops.rwkv7"
# The decay is exp(-exp(-0.5) * sigmoid(·)): the official soft clamp w = -softplus(-z) - 0.5 of the
# log log-decay, written directly as a log decay (exp(w) = exp(-0.5) * sigmoid(z)).
MAX_DECAY_RATE = math.exp(-0.5)
GROUP_NORM_EPS = 64e-5  # the official ln_x eps (1e-5 * head_size_divisor**2 with divisor 8)
SHIFT_TARGETS = ("r", "w", "k", "v", "a", "g")  # order of the rows of ``shift_mix``


def rwkv7_recurrent(q, log_w, k, v, a, b, initial_state=None):
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


def rwkv7_chunked(q, log_w, k, v, a, b, chunk_size: int = 16):
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
    pad = -T % C
    n = (T + pad) // C

    def chunks(x):  # [B, T, H, D] -> [B, H, n, C, D]; zero padding is a no-op step (decay 1, no write)
        x = F.pad(x.to(dtype), (0, 0, 0, 0, 0, pad))
        return x.view(B, n, C, H, x.shape[-1]).permute(0, 3, 1, 2, 4)

    q, log_w, k, v, a, b = map(chunks, (q, log_w, k, v, a, b))
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
    eye = torch.eye(C, dtype=dtype, device=q.device)
    W_U0 = torch.linalg.solve_triangular(eye - A_ab, torch.cat([a_in, A_ak @ v], dim=-1),
                                         upper=False, unitriangular=True)
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
    return out.permute(0, 2, 3, 1, 4).reshape(B, n * C, H, V)[:, :T]


def _rwkv7_kernel(q, log_w, k, v, a, b):
    """The same op through flash-linear-attention's chunked Triton kernel (CUDA only).

    All tensors [B, T, H, ·], fla's own layout; ``scale=1`` because RWKV-7 does not scale r·k, and the
    log-decay bound licenses fla's faster tensor-core path (it is slightly looser than exp(-0.5) so
    float32 rounding of exp(-0.5) * sigmoid(·) stays inside it).
    """
    from fla.ops.rwkv7 import chunk_rwkv7

    out, _ = chunk_rwkv7(r=q, w=log_w, k=k, v=v, a=a, b=b, scale=1.0, initial_state=None,
                         output_final_state=False, lower_bound=-0.607)
    return out


@register_mixer("rwkv7")
class RWKV7TimeMix(TokenMixer):
    """RWKV-7 time mixing, as in BlinkDL's RWKV-LM (RWKV-v7) and the ``rwkv`` package's RWKV_x070.

    Shapes (H = d_model // head_dim heads of size N = head_dim, D = d_model):
      x [B, L, D] -> token-shifted mixes xr, xw, xk, xv, xa, xg [B, L, D]
      -> r, k, v, log decay w, in-context learning rate a, gate g [B, L, D] (heads: [B, L, H, N])
      -> state readout [B, L, H, N] -> per-head GroupNorm + bonus (r·k·r_k) v -> × g -> out [B, L, D].

    Weight matrices are stored [in, out] and applied as ``x @ W`` (the low-rank pairs as
    ``x @ down @ up``). Layer 0 stores its value in ``ctx.shared["v_first"]``; later layers mix
    towards it (the value residual) and own the ``value_mix_*`` parameters, which layer 0 lacks.
    Official names: shift_mix = x_r..x_g; decay_base/down/up = w0/w1/w2; iclr_base/down/up =
    a0/a1/a2; value_mix_base/down/up = v0/v1/v2; gate_down/up = g1/g2; removal_key_scale = k_k;
    iclr_key_mix = k_a; bonus = r_k; receptance/key/value/output = R/K/V/O; out_norm = ln_x.
    """

    exposes_attention = False
    backends = (backends.REFERENCE, backends.KERNEL)

    def __init__(self, d_model: int, max_len: int, layer_idx: int, head_dim: int = 16,
                 decay_lora: int = 16, a_lora: int = 16, v_lora: int = 8, gate_lora: int = 32):
        super().__init__(d_model, max_len, layer_idx)
        if head_dim < 1 or d_model % head_dim:
            raise ValueError(f"head_dim must be ≥ 1 and divide d_model={d_model}, got head_dim={head_dim}")
        for name, rank in [("decay_lora", decay_lora), ("a_lora", a_lora), ("v_lora", v_lora),
                           ("gate_lora", gate_lora)]:
            if rank < 1:
                raise ValueError(f"{name} must be ≥ 1, got {rank}")
        D = d_model
        self.head_dim = head_dim
        self.n_heads = D // head_dim
        self.last_backend = backends.REFERENCE

        # Plain [in, out] matrices, as the official code stores them. RWKV-7 has no init_weights: it
        # keeps its own official init whatever `model.init` names (the model never touches it).
        def param(*shape):
            return nn.Parameter(torch.empty(*shape))

        self.shift_mix = param(len(SHIFT_TARGETS), D)  # rows: r, w, k, v, a, g
        self.receptance, self.key, self.value, self.output = (param(D, D) for _ in range(4))
        self.decay_base, self.decay_down, self.decay_up = param(D), param(D, decay_lora), param(decay_lora, D)
        self.iclr_base, self.iclr_down, self.iclr_up = param(D), param(D, a_lora), param(a_lora, D)
        self.has_value_residual = layer_idx > 0
        if self.has_value_residual:
            self.value_mix_base, self.value_mix_down = param(D), param(D, v_lora)
            self.value_mix_up = param(v_lora, D)
        self.gate_down, self.gate_up = param(D, gate_lora), param(gate_lora, D)
        self.removal_key_scale, self.iclr_key_mix = param(D), param(D)
        self.bonus = param(self.n_heads, head_dim)
        self.out_norm = nn.GroupNorm(self.n_heads, D, eps=GROUP_NORM_EPS)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The official RWKV-7 init (RWKV-LM's RWKV_Tmix_x070) with two changes.

        1. Every layer gets the schedule of a stack's first layer: a mixer does not know its model's
           depth, which the official per-layer ramps depend on.
        2. The low-rank down-projections and the output matrix start small instead of zero, so that
           every parameter gets a gradient from the first step (zero output would block all of them;
           zero down-projections block their up-projections). The block still starts as nearly the
           identity, as the official zero output intends.
        """
        D, N = self.d_model, self.head_dim
        channel = torch.arange(D, dtype=torch.float)
        fraction = channel / D  # 0 .. (D-1)/D
        linear = channel / max(D - 1, 1) - 0.5  # -0.5 .. 0.5
        zigzag = ((channel % N) - (N - 1) / 2) / max((N - 1) / 2, 1)  # -1 .. 1 within each head
        zigzag = zigzag * zigzag.abs()

        # Early channels look mostly at the previous token, late ones at the current one.
        powers = torch.tensor([0.2, 0.9, 0.7, 0.7, 0.9, 0.2])  # r, w, k, v, a, g
        self.shift_mix.copy_(1.0 - fraction[None, :] ** powers[:, None])
        # Decays ramp from ≈1 (long memory) on early channels to ≈0.56 on the last, zigzag in each head.
        self.decay_base.copy_(-6 + 6 * channel / max(D - 1, 1) + 0.5 + 2.5 * zigzag)
        self.iclr_base.copy_(-0.19 + 0.3 * zigzag + 0.4 * linear)
        bound = D ** -0.5
        pairs = [(self.decay_down, self.decay_up), (self.iclr_down, self.iclr_up),
                 (self.gate_down, self.gate_up)]
        if self.has_value_residual:
            self.value_mix_base.copy_(0.73 - 0.4 * linear)
            pairs.append((self.value_mix_down, self.value_mix_up))
        for down, up in pairs:
            down.uniform_(-0.1 * bound, 0.1 * bound)  # official: zero
            nn.init.orthogonal_(up, gain=0.1)
        self.removal_key_scale.copy_(0.71 - 0.1 * linear)
        self.iclr_key_mix.fill_(1.02)
        self.bonus.fill_(-0.04)
        self.receptance.uniform_(-0.5 * bound, 0.5 * bound)
        self.key.uniform_(-0.05 * bound, 0.05 * bound)
        self.value.uniform_(-0.5 * bound, 0.5 * bound)
        self.output.uniform_(-0.1 * bound, 0.1 * bound)  # official: zero
        self.out_norm.reset_parameters()

    @property
    def backend(self) -> str:
        return self.last_backend

    def state_size(self, length: int) -> int:
        """The per-head state S [H, N, N] and the token shift's previous input [D]; no length.
        (Layer 0's value, shared with later layers, is per token: not carried between tokens.)"""
        return self.n_heads * self.head_dim * self.head_dim + self.d_model

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        B, L, D = x.shape
        H, N = self.n_heads, self.head_dim
        # Token shift: each position mixes in (previous - current); the first sees a zero previous.
        delta = F.pad(x, (0, 0, 1, -1)) - x  # [B, L, D]
        xr, xw, xk, xv, xa, xg = x + delta * self.shift_mix[:, None, None, :]  # 6 × [B, L, D]

        r = xr @ self.receptance
        decay_logit = self.decay_base + torch.tanh(xw @ self.decay_down) @ self.decay_up
        log_w = -MAX_DECAY_RATE * torch.sigmoid(decay_logit)  # [B, L, D] in [-exp(-0.5), 0)
        k = xk @ self.key
        v = xv @ self.value
        iclr = torch.sigmoid(self.iclr_base + xa @ self.iclr_down @ self.iclr_up)  # [B, L, D] in (0, 1)
        g = torch.sigmoid(xg @ self.gate_down) @ self.gate_up

        if self.has_value_residual:
            v_first = ctx.shared.get("v_first")
            if v_first is None or v_first.shape != v.shape:
                raise RuntimeError(f"rwkv7 layer {self.layer_idx} needs layer 0's value in "
                                   "ctx.shared['v_first'] for this batch: run layer 0 first with the same ctx")
            residual = torch.sigmoid(self.value_mix_base + xv @ self.value_mix_down @ self.value_mix_up)
            v = torch.lerp(v, v_first, residual)  # v + (v_first - v) * residual
        else:
            ctx.shared["v_first"] = v

        k_scaled = (k * self.removal_key_scale).view(B, L, H, N)
        removal_key = F.normalize(k_scaled, dim=-1)  # kk [B, L, H, N]: unit length per head
        k = k * (1 + (iclr - 1) * self.iclr_key_mix)
        r, log_w, k, v, iclr = (t.view(B, L, H, N) for t in (r, log_w, k, v, iclr))

        self.last_backend = backends.choose(x, KERNEL_MODULE)
        core = _rwkv7_kernel if self.last_backend == backends.KERNEL else rwkv7_chunked
        out = core(r, log_w, k, v, -removal_key, removal_key * iclr).to(x.dtype)  # [B, L, H, N]

        out = self.out_norm(out.reshape(B * L, D)).view(B, L, H, N)
        out = out + (r * k * self.bonus).sum(dim=-1, keepdim=True) * v  # the bonus: this token's own value
        return (out.reshape(B, L, D) * g) @ self.output
