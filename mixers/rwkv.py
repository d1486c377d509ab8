"""RWKV-7 ("Goose") time mixing: a per-channel-decayed state updated by a generalised delta rule.

Per head (head size N), with the state S [N_v, N_k] oriented as in the official ``rwkv`` package::

    S_t   = S_{t-1} (diag(exp(w_t)) + a_t b_t^T) + v_t k_t^T      a = -kk, b = kk * iclr
    out_t = S_t r_t

``w_t`` is the log decay, in [-exp(-0.5), 0) (a decay in (0.545, 1]); ``kk`` is the L2-normalised
"removal key" and ``iclr`` ∈ (0, 1) the in-context learning rate, so ``S (I - kk (kk*iclr)^T)``
partly erases what the state stored along kk before the new value is written.

The core op (``mixers/ops/rwkv7.py``) has two backends with the same parameters:
flash-linear-attention's chunked Triton kernel on CUDA, and a pure-PyTorch chunked WY form.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.mixers import backend as backends
from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.ops.rwkv7 import KERNEL_MODULE, rwkv7_chunked, rwkv7_kernel
from emergence_bench.registry import register_mixer

# The decay is exp(-exp(-0.5) * sigmoid(·)): the official soft clamp w = -softplus(-z) - 0.5 of the
# log log-decay, written directly as a log decay (exp(w) = exp(-0.5) * sigmoid(z)).
MAX_DECAY_RATE = math.exp(-0.5)
GROUP_NORM_EPS = 64e-5  # the official ln_x eps (1e-5 * head_size_divisor**2 with divisor 8)
SHIFT_TARGETS = ("r", "w", "k", "v", "a", "g")  # order of the rows of ``shift_mix``


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
    n_heads: int
    backends = (backends.REFERENCE, backends.KERNEL)
    small = {"head_dim": 8, "decay_lora": 4, "a_lora": 4, "v_lora": 4, "gate_lora": 6}
    width_matched = {"head_dim": 16}

    def __init__(self, d_model: int, max_len: int, layer_idx: int, head_dim: int = 16,
                 decay_lora: int = 16, a_lora: int = 16, v_lora: int = 8, gate_lora: int = 32) -> None:
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
        def param(*shape: int) -> nn.Parameter:
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
        core = rwkv7_kernel if self.last_backend == backends.KERNEL else rwkv7_chunked
        out = core(r, log_w, k, v, -removal_key, removal_key * iclr).to(x.dtype)  # [B, L, H, N]

        out = self.out_norm(out.reshape(B * L, D)).view(B, L, H, N)
        out = out + (r * k * self.bonus).sum(dim=-1, keepdim=True) * v  # the bonus: this token's own value
        return (out.reshape(B, L, D) * g) @ self.output

