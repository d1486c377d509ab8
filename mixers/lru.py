"""LRU, the Linear Recurrent Unit (Orvieto et al., 2023, "Resurrecting Recurrent Neural Networks for
Long Sequences"): a linear RNN with a complex diagonal recurrence and a nonlinear, gated read-out.

Per complex state channel n (N = ``d_state`` of them) and real input x_t [H] (H = d_model)::

    h_t = λ ⊙ h_{t-1} + γ ⊙ (B x_t)       λ_n = exp(-exp(ν_n) + i·exp(θ_n)),  γ_n = exp(γ_log_n)
    y_t = Re(C h_t) + D ⊙ x_t              B [N, H] and C [H, N] complex, D [H] real

|λ_n| = exp(-exp(ν_n)) < 1 for every ν (the stable exponential parametrisation), and γ starts at
sqrt(1 - |λ|²), so for white input every state channel starts with the variance of its input,
however long its memory (the γ-normalisation). The block around it is the paper's: y -> GELU -> GLU,
out = W_a g ⊙ σ(W_g g) (its norm and residual are SequenceModel's; no dropout).

λ does not depend on the input, so the recurrence is an associative scan (``mixers/ops/lru_scan.py``).
No GPU kernel: no maintained package implements the complex LRU scan, and on CUDA the scan is the
same few elementwise ops per step.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.init import WeightInit
from emergence_bench.mixers.ops.lru_scan import lru_scan
from emergence_bench.registry import register_mixer


@register_mixer("lru")
class LRU(TokenMixer):
    """The LRU block as a token mixer.

    x [B, L, H] -γ ⊙ B-> b [B, L, N] (complex) -scan-> h [B, L, N] -Re(C ·) + D ⊙ x-> y [B, L, H]
    -GELU-> -GLU (glu: H -> 2H, halves a ⊙ σ(g))-> out [B, L, H]

    ``d_state`` N complex channels; λ starts with |λ| in [r_min, r_max] (|λ|² uniform, as the paper
    draws it) and phase uniform in [0, max_phase]. The defaults are the paper's reference code's
    (r_min 0, r_max 1, max_phase 2π). ``init_weights`` gives the model's named init to the GLU and to
    B and C (fan-in 2H and N: ``lecun_normal`` is then exactly the paper's N(0, 1/(2H)) and N(0, 1/N)
    per real and imaginary part); ν, θ, γ and D keep the paper's init, and no weight decay on ν, θ, γ.
    """

    exposes_attention = False
    small = {"d_state": 8}
    width_matched = {}

    def __init__(self, d_model: int, max_len: int, layer_idx: int, d_state: int = 64, r_min: float = 0.0,
                 r_max: float = 1.0, max_phase: float = 2 * math.pi) -> None:
        super().__init__(d_model, max_len, layer_idx)
        if not (isinstance(d_state, int) and d_state >= 1):
            raise ValueError(f"d_state must be an integer ≥ 1, got {d_state!r}")
        if not (0 <= r_min < r_max <= 1):
            raise ValueError(f"r_min and r_max must satisfy 0 ≤ r_min < r_max ≤ 1, got r_min={r_min!r}, "
                             f"r_max={r_max!r}")
        if not max_phase > 0:
            raise ValueError(f"max_phase must be > 0, got {max_phase!r}")
        H, N = d_model, d_state
        self.d_state, self.r_min, self.r_max, self.max_phase = N, r_min, r_max, max_phase
        self.nu_log = nn.Parameter(torch.empty(N))
        self.theta_log = nn.Parameter(torch.empty(N))
        self.gamma_log = nn.Parameter(torch.empty(N))
        self.B_re, self.B_im = nn.Parameter(torch.empty(N, H)), nn.Parameter(torch.empty(N, H))
        self.C_re, self.C_im = nn.Parameter(torch.empty(H, N)), nn.Parameter(torch.empty(H, N))
        self.D = nn.Parameter(torch.empty(H))
        self.glu = nn.Linear(H, 2 * H)
        self.no_weight_decay(self.nu_log, self.theta_log, self.gamma_log)  # the paper's choice
        self.init_weights(WeightInit())
        self.reset_recurrence_parameters()

    def state_size(self, length: int) -> int:
        """The complex state h [N], two reals per entry; no length."""
        return 2 * self.d_state

    def init_weights(self, init: WeightInit) -> None:
        init.linear_(self.glu)
        for weight in (self.B_re, self.B_im):
            init.matrix_(weight, 2 * self.d_model)
        for weight in (self.C_re, self.C_im):
            init.matrix_(weight, self.d_state)

    @torch.no_grad()
    def reset_recurrence_parameters(self) -> None:
        """The paper's init of λ, γ and D: |λ|² uniform in [r_min², r_max²] (uniform on the ring's
        area), phase uniform in [0, max_phase], γ = sqrt(1 - |λ|²), D ~ N(0, 1)."""
        N = self.d_state
        # In float64, and clamped so that no log below is -inf (|λ| = 0 or 1, or a zero phase, exactly).
        u1, u2 = torch.rand(N, dtype=torch.float64), torch.rand(N, dtype=torch.float64)
        modulus_sq = (u1 * (self.r_max ** 2 - self.r_min ** 2) + self.r_min ** 2).clamp(1e-12, 1 - 1e-12)
        nu_log = torch.log(-0.5 * torch.log(modulus_sq))  # |λ| = exp(-exp(ν))
        self.nu_log.copy_(nu_log)
        self.theta_log.copy_(torch.log(self.max_phase * u2.clamp_min(1e-12)))
        self.gamma_log.copy_(0.5 * torch.log(-torch.expm1(-2 * nu_log.exp())))  # log sqrt(1 - |λ|²)
        self.D.normal_()

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        gamma = self.gamma_log.exp()  # [N]
        b_re, b_im = (x @ self.B_re.T) * gamma, (x @ self.B_im.T) * gamma  # γ ⊙ B x  [B, L, N]
        h_re, h_im = lru_scan(b_re, b_im, self.nu_log, self.theta_log)  # [B, L, N]
        h_re, h_im = h_re.to(x.dtype), h_im.to(x.dtype)
        y = h_re @ self.C_re.T - h_im @ self.C_im.T + self.D * x  # Re(C h) + D x  [B, L, H]
        a, g = self.glu(F.gelu(y)).chunk(2, dim=-1)
        return a * torch.sigmoid(g)

