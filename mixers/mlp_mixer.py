"""Causal MLP-Mixer token mixing: a two-layer MLP across positions, shared over channels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.registry import register_mixer
from mixers.base import MixerContext, TokenMixer


@register_mixer("mlp_mixer")
class CausalMLPMixer(TokenMixer):
    """MLP-Mixer's token-mixing MLP, made causal by lower-triangular weight masks.

    Each channel d is mixed independently with the same weights: position s feeds ``expansion``
    hidden units at every position block t ≥ s, and hidden block s feeds output t ≥ s.

    Shapes: x [B, L, D] -> hidden [B, L, E, D] -> out [B, L, D], with E = expansion, L ≤ max_len.
    Weights: w_in [N, E, N] (t, e, s), w_out [N, N, E] (t, s, e), b_in [N, E], b_out [N], N = max_len.
    A forward on L < max_len uses the top-left L-slices, which are causal on their own.
    """

    exposes_attention = False

    def __init__(self, d_model: int, max_len: int, layer_idx: int, expansion: int = 2):
        super().__init__(d_model, max_len, layer_idx)
        if expansion < 1:
            raise ValueError(f"expansion must be ≥ 1, got {expansion}")
        self.expansion = expansion
        N, E = max_len, expansion
        causal = torch.ones(N, N, dtype=torch.bool).tril()  # [t, s]: s ≤ t
        self.register_buffer("mask_in", causal[:, None, :], persistent=False)  # [N, 1, N]
        self.register_buffer("mask_out", causal[:, :, None], persistent=False)  # [N, N, 1]
        self.w_in = nn.Parameter(torch.empty(N, E, N))
        self.w_out = nn.Parameter(torch.empty(N, N, E))
        self.b_in = nn.Parameter(torch.zeros(N, E))
        self.b_out = nn.Parameter(torch.zeros(N))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        # Row t of a causal layer sees only t + 1 input positions (× E hidden units for w_out), so a
        # fan-in of N would shrink early positions' outputs and leave later ones at full scale. LeCun
        # scaling by the unmasked fan-in keeps every position's pre-activation at the (layer-normed)
        # input's scale; masked entries are zeroed so they never show up in norms or weight decay.
        fan_in = torch.arange(1, self.max_len + 1, dtype=torch.float)  # [N]
        nn.init.normal_(self.w_in)
        self.w_in.mul_(fan_in.rsqrt()[:, None, None]).mul_(self.mask_in)
        nn.init.normal_(self.w_out)
        self.w_out.mul_((fan_in * self.expansion).rsqrt()[:, None, None]).mul_(self.mask_out)
        self.b_in.zero_()
        self.b_out.zero_()

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        L = x.shape[1]
        if L > self.max_len:
            raise ValueError(f"sequence length {L} exceeds max_len={self.max_len}")
        # The masks are applied at every forward, so causality holds whatever the optimiser does.
        w_in = self.w_in[:L, :, :L] * self.mask_in[:L, :, :L]  # [L, E, L]
        w_out = self.w_out[:L, :L] * self.mask_out[:L, :L]  # [L, L, E]
        hidden = torch.einsum("tes,bsd->bted", w_in, x) + self.b_in[:L, :, None]  # [B, L, E, D]
        return torch.einsum("tse,bsed->btd", w_out, F.gelu(hidden)) + self.b_out[:L, None]
