"""Causal softmax multi-head attention (the Transformer's token mixer)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.init import WeightInit
from emergence_bench.registry import register_mixer


@register_mixer("transformer")
class CausalSelfAttention(TokenMixer):
    """Multi-head causal self-attention with explicit logits when an intervention is active.

    ``n_heads`` and ``head_dim`` are independent knobs, so the attention width n_heads × head_dim
    may differ from d_model.

    Shapes: x [B, L, D] -> q, k, v [B, H, L, head_dim] -> logits/probs [B, H, L, L] -> out [B, L, D].
    """

    exposes_attention = True
    n_heads: int
    causal: torch.Tensor  # a buffer [max_len, max_len]
    small = {"n_heads": 2, "head_dim": 4}
    width_matched = {"n_heads": 4, "head_dim": 16}

    def __init__(self, d_model: int, max_len: int, layer_idx: int, n_heads: int = 8, head_dim: int = 8) -> None:
        super().__init__(d_model, max_len, layer_idx)
        if n_heads < 1 or head_dim < 1:
            raise ValueError(f"n_heads and head_dim must be ≥ 1, got n_heads={n_heads}, head_dim={head_dim}")
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.qkv = nn.Linear(d_model, 3 * n_heads * head_dim)
        self.out = nn.Linear(n_heads * head_dim, d_model)
        causal = torch.ones(max_len, max_len, dtype=torch.bool).tril()
        self.register_buffer("causal", causal, persistent=False)

    def state_size(self, length: int) -> int:
        """The KV cache: a key and a value of n_heads × head_dim for each of ``length`` tokens."""
        return 2 * self.n_heads * self.head_dim * length

    def init_weights(self, init: WeightInit) -> None:
        """Both projections follow the model's named init (it sets the initial logit scale)."""
        init.linear_(self.qkv)
        init.linear_(self.out)

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if ctx.intervenes_on(self.layer_idx):
            mixed = self._explicit(q, k, v, ctx)
        else:  # nothing to read or change: the fused kernel gives the same numbers faster
            mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(mixed.transpose(1, 2).reshape(B, L, self.n_heads * self.head_dim))

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        """q, k, v [B, H, L, hd] -> [B, H, L, hd], applying bias, patch and capture in order."""
        L = q.shape[2]
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        logits = ctx.bias_for(self.layer_idx, logits)
        logits = logits.masked_fill(~self.causal[:L, :L], float("-inf"))
        probs = ctx.patch_for(self.layer_idx, logits.softmax(dim=-1))
        ctx.record(self.layer_idx, probs)
        return probs @ v
