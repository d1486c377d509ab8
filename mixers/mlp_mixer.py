"""Causal MLP-Mixer token mixing, in two forms.

``static`` (the default, the paper's form): dot-product attention replaced by "a static learned
matrix that mixes information across sequence positions" — one causal [L, L] matrix per head,
applied to a value projection, then an output projection.

``mlp``: MLP-Mixer's original token-mixing MLP (two layers with a GELU), shared over channels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.init import WeightInit
from emergence_bench.registry import register_mixer

TOKEN_MIXING = ("static", "mlp")
MIXING_INIT = ("uniform", "scheme")


@register_mixer("mlp_mixer")
class CausalMLPMixer(TokenMixer):
    """MLP-Mixer token mixing, made causal by lower-triangular masks applied at every forward.

    ``token_mixing="static"`` (uses ``n_heads``, ``head_dim``; the Transformer's names and defaults,
    so the two have the same width): per head h, a learned matrix M_h mixes the values::

        v = x W_v                        x [B, L, D] -> v [B, L, H, Dh]
        y_h[t] = Σ_{s ≤ t} M_h[t, s] v_h[s]            y [B, L, H, Dh]
        out = concat_h(y_h) W_o                      out [B, L, D]

    Parameters: value [D -> H·Dh] and out [H·Dh -> D] Linears, mixing [H, N, N] (t, s), N = max_len.

    ``token_mixing="mlp"`` (uses ``expansion``): each channel d is mixed independently with the same
    weights: position s feeds ``expansion`` hidden units at every position block t ≥ s, and hidden
    block s feeds output t ≥ s. x [B, L, D] -> hidden [B, L, E, D] -> out [B, L, D], E = expansion.
    Parameters: w_in [N, E, N] (t, e, s), w_out [N, N, E] (t, s, e), b_in [N, E], b_out [N].

    A forward on L < max_len uses the top-left L-slices, which are causal on their own. The mixing
    weights are not softmax attention scores, so ``exposes_attention`` is False.
    """

    exposes_attention = False
    n_heads: int
    mask: torch.Tensor  # buffers: static [N, N]; mlp mask_in [N, 1, N] and mask_out [N, N, 1]
    mask_in: torch.Tensor
    mask_out: torch.Tensor
    small = {"token_mixing": "static", "n_heads": 2, "head_dim": 4}
    width_matched = {}  # its defaults have the Transformer's width: 8 heads × 8
    forms = {"mlp": {"token_mixing": "mlp", "expansion": 2}}

    def __init__(self, d_model: int, max_len: int, layer_idx: int, token_mixing: str = "static",
                 n_heads: int = 8, head_dim: int = 8, expansion: int = 2, mixing_init: str = "uniform") -> None:
        super().__init__(d_model, max_len, layer_idx)
        if token_mixing not in TOKEN_MIXING:
            raise ValueError(f"token_mixing must be one of {', '.join(TOKEN_MIXING)}, got {token_mixing!r}")
        if mixing_init not in MIXING_INIT:
            raise ValueError(f"mixing_init must be one of {', '.join(MIXING_INIT)}, got {mixing_init!r}")
        self.mixing_init = mixing_init
        if n_heads < 1 or head_dim < 1:
            raise ValueError(f"n_heads and head_dim must be ≥ 1, got n_heads={n_heads}, head_dim={head_dim}")
        if expansion < 1:
            raise ValueError(f"expansion must be ≥ 1, got {expansion}")
        self.token_mixing = token_mixing
        self.n_heads, self.head_dim, self.expansion = n_heads, head_dim, expansion
        N, E = max_len, expansion
        causal = torch.ones(N, N, dtype=torch.bool).tril()  # [t, s]: s ≤ t
        # Only the chosen form's parameters exist: an unused parameter would never get a gradient.
        if token_mixing == "static":
            self.register_buffer("mask", causal, persistent=False)  # [N, N]
            self.value = nn.Linear(d_model, n_heads * head_dim)
            self.mixing = nn.Parameter(torch.empty(n_heads, N, N))
            self.out = nn.Linear(n_heads * head_dim, d_model)
        else:
            self.register_buffer("mask_in", causal[:, None, :], persistent=False)  # [N, 1, N]
            self.register_buffer("mask_out", causal[:, :, None], persistent=False)  # [N, N, 1]
            self.w_in = nn.Parameter(torch.empty(N, E, N))
            self.w_out = nn.Parameter(torch.empty(N, N, E))
            self.b_in = nn.Parameter(torch.zeros(N, E))
            self.b_out = nn.Parameter(torch.zeros(N))
        self.reset_parameters()

    def state_size(self, length: int) -> int:
        """The past inputs it mixes, for each of ``length`` tokens: the values [H·Dh] (``static``),
        or the inputs [D] themselves (``mlp``: its hidden units are recomputed from them)."""
        per_token = self.n_heads * self.head_dim if self.token_mixing == "static" else self.d_model
        return per_token * length

    def init_weights(self, init: WeightInit) -> None:
        """The model's named init for the projections (value/out); ``mixing_init`` says whether the
        mixing matrices keep the uniform average (``uniform``) or follow the scheme too
        (``scheme``: fan-in max_len, as the JAX reproduction's N(0, 1/L)). The ``mlp`` form keeps
        its own fan-in-scaled init."""
        if self.token_mixing != "static":
            return
        init.linear_(self.value)
        init.linear_(self.out)
        if self.mixing_init == "scheme":
            with torch.no_grad():
                init.matrix_(self.mixing, fan_in=self.max_len).mul_(self.mask)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Every parameter of this mixer; nothing outside it is expected to initialise them."""
        fan_in = torch.arange(1, self.max_len + 1, dtype=torch.float)  # [N]: row t sees t + 1 positions
        if self.token_mixing == "static":
            self.value.reset_parameters()
            self.out.reset_parameters()
            # Uniform averaging over the visible prefix, M_h[t, s] = 1/(t+1) for s ≤ t: exactly what
            # causal softmax attention computes at init (small logits -> uniform probs), so this mixer
            # starts where the Transformer starts and the two differ only in how they learn to become
            # sparse. The rows sum to 1, so no position starts louder than another. The heads need no
            # noise to differ: their value and output weights are already random.
            self.mixing.copy_((self.mask / fan_in[:, None]).expand_as(self.mixing))
        else:
            # Row t of a causal layer sees only t + 1 input positions (× E hidden units for w_out), so
            # a fan-in of N would shrink early positions' outputs and leave later ones at full scale.
            # LeCun scaling by the unmasked fan-in keeps every position's pre-activation at the
            # (layer-normed) input's scale; masked entries are zeroed so they never show up in norms
            # or weight decay.
            nn.init.normal_(self.w_in)
            self.w_in.mul_(fan_in.rsqrt()[:, None, None]).mul_(self.mask_in)
            nn.init.normal_(self.w_out)
            self.w_out.mul_((fan_in * self.expansion).rsqrt()[:, None, None]).mul_(self.mask_out)
            self.b_in.zero_()
            self.b_out.zero_()

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        """x [B, L, D] -> [B, L, D], L ≤ max_len."""
        L = x.shape[1]
        if L > self.max_len:
            raise ValueError(f"sequence length {L} exceeds max_len={self.max_len}")
        return self._static(x) if self.token_mixing == "static" else self._mlp(x)

    def _static(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        v = self.value(x).view(B, L, self.n_heads, self.head_dim)  # [B, L, H, Dh]
        # Masked at every forward, so causality holds whatever the optimiser does to entries s > t.
        mixing = self.mixing[:, :L, :L] * self.mask[:L, :L]  # [H, L, L]
        y = torch.einsum("hts,bshd->bthd", mixing, v)  # [B, L, H, Dh]
        return self.out(y.reshape(B, L, self.n_heads * self.head_dim))

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        L = x.shape[1]
        w_in = self.w_in[:L, :, :L] * self.mask_in[:L, :, :L]  # [L, E, L]
        w_out = self.w_out[:L, :L] * self.mask_out[:L, :L]  # [L, L, E]
        hidden = torch.einsum("tes,bsd->bted", w_in, x) + self.b_in[:L, :, None]  # [B, L, E, D]
        return torch.einsum("tse,bsed->btd", w_out, F.gelu(hidden)) + self.b_out[:L, None]
