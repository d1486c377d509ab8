"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, 2024): a linear RNN whose matrix state is written with
the delta rule and forgets through a per-head, data-dependent scalar decay.

Per head, with unit-norm key k_t [K], value v_t [V], write strength beta_t ∈ (0, 1) and log-decay
g_t ≤ 0, the state S_t [V, K] and output o_t [V] are::

    S_t = exp(g_t) · S_{t-1} · (I - beta_t k_t k_tᵀ) + beta_t v_t k_tᵀ
    o_t = scale · S_t q_t

The core op (``mixers/ops/gated_delta_rule.py``) has two backends over the same tensors, so a
checkpoint moves between them: flash-linear-attention's Triton kernel on CUDA, and the pure-PyTorch
chunked form (WY/UT form inside chunks of ``chunk_size`` positions, a recurrence across chunks).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.mixers.backend import KERNEL, REFERENCE, choose
from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.init import WeightInit
from emergence_bench.mixers.ops.gated_delta_rule import (
    KERNEL_MODULE,
    gated_delta_rule_chunked,
    gated_delta_rule_kernel,
    l2_normalize,
)
from emergence_bench.registry import register_mixer

# The reference's chunking: a float order, not a model choice (any chunk computes the same function).
# Chosen by measuring the ranking's whole training step (8 seeds batched, 1 thread; docs/speed.md):
# chunks of 16 take 0.91x the time of chunks of 32 at 64 and 128 positions, but 1.32x at 20 (two
# chunks where one did), so a sequence of at most ONE_CHUNK_UP_TO positions is one chunk. Ladder
# v2's shipped rows ran chunks of 32 (the same single chunk up to 32): its presets say
# ``chunk_size: 32``, which reproduces them bit for bit.
CHUNK_SIZE, ONE_CHUNK_UP_TO = 16, 32


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
    n_heads: int
    backends = (REFERENCE, KERNEL)
    small = {"n_heads": 2, "head_dim": 8, "expand_v": 1}
    width_matched = {"n_heads": 4, "head_dim": 16}

    def __init__(self, d_model: int, max_len: int, layer_idx: int, n_heads: int = 4, head_dim: int = 16,
                 expand_v: float = 2, conv_size: int = 4, chunk_size: int = CHUNK_SIZE) -> None:
        super().__init__(d_model, max_len, layer_idx)
        if n_heads < 1 or head_dim < 1:
            raise ValueError(f"n_heads and head_dim must be ≥ 1, got n_heads={n_heads}, head_dim={head_dim}")
        head_v_dim = head_dim * expand_v
        if expand_v <= 0 or head_v_dim != int(head_v_dim):
            raise ValueError(f"expand_v must be > 0 with head_dim * expand_v a whole number, got "
                             f"expand_v={expand_v} (head_dim={head_dim})")
        if conv_size < 1:
            raise ValueError(f"conv_size must be ≥ 1, got {conv_size}")
        if not (isinstance(chunk_size, int) and chunk_size >= 1):
            raise ValueError(f"chunk_size must be an integer ≥ 1, got {chunk_size!r}")
        self.n_heads, self.head_dim, self.head_v_dim = n_heads, head_dim, int(head_v_dim)
        self.conv_size, self.chunk_size = conv_size, chunk_size
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
        self.no_weight_decay(self.A_log, self.dt_bias)

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
        if self.last_backend == KERNEL:
            o = gated_delta_rule_kernel(q, k, v, g, beta, scale=K ** -0.5)  # [B, L, H, V]
        else:
            chunk = L if L <= max(ONE_CHUNK_UP_TO, self.chunk_size) else self.chunk_size
            o = gated_delta_rule_chunked(q, k, v, g, beta, scale=K ** -0.5, chunk_size=chunk)

        # Gated RMSNorm per head: normalise, scale, then gate.
        o = o * torch.rsqrt(o.square().mean(-1, keepdim=True) + self.o_norm_eps) * self.o_norm_weight
        o = o * F.silu(self.g_proj(x).view(B, L, H, V))
        return self.o_proj(o.reshape(B, L, H * V))

