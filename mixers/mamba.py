"""Mamba (Mamba-1): a gated, input-selective diagonal state-space model.

Backends: mamba-ssm's fused CUDA ``selective_scan_fn`` on GPU, else our pure-PyTorch chunked scan
(``selective_scan``). Both read the same parameters, so a checkpoint moves between them. The scan
itself, its backward and its vmap rules live in ``mixers/ops/selective_scan.py``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.mixers import backend as backends
from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.init import WeightInit
from emergence_bench.mixers.ops.selective_scan import KERNEL_MODULE, selective_scan, selective_scan_kernel
from emergence_bench.registry import register_mixer

DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 1e-1, 1e-4  # Mamba's range for the initial step size delta


@register_mixer("mamba")
class Mamba(TokenMixer):
    """The Mamba-1 block (Gu & Dao, 2023) as a token mixer.

    x [B, L, D] -in_proj-> u, z [B, L, E] (E = d_inner = expand·D)
    u -causal depthwise conv (width d_conv) + SiLU-> u [B, L, E]
    u -x_proj-> dt [B, L, R], B_t, C_t [B, L, N] (R = dt_rank, N = d_state)
    delta = softplus(dt_proj(dt)) [B, L, E];  A = -exp(A_log) [E, N];  D [E]
    y = selective_scan(u, delta, A, B_t, C_t, D) · SiLU(z) [B, L, E] -out_proj-> [B, L, D]

    ``dt_proj`` is held as two plain parameters (``dt_proj_weight`` [E, R], ``dt_proj_bias`` [E]):
    its bias is the step-size init, which the kernel takes separately. ``init_weights`` gives the
    model's named init to in/x/out projections only; the SSM parameters keep Mamba's own init.
    """

    exposes_attention = False
    backends = (backends.REFERENCE, backends.KERNEL)
    small = {"d_state": 4, "expand": 2}
    width_matched = {}

    def __init__(self, d_model: int, max_len: int, layer_idx: int, d_state: int = 16, d_conv: int = 4,
                 expand: int = 2, dt_rank: int | str = "auto") -> None:
        super().__init__(d_model, max_len, layer_idx)
        if not (isinstance(d_state, int) and d_state >= 1):
            raise ValueError(f"d_state must be an integer ≥ 1, got {d_state!r}")
        if not (isinstance(d_conv, int) and d_conv >= 1):
            raise ValueError(f"d_conv must be an integer ≥ 1, got {d_conv!r}")
        if not (isinstance(expand, (int, float)) and int(expand * d_model) >= 1):
            raise ValueError(f"expand must be > 0 with expand·d_model ≥ 1, got expand={expand!r}")
        if dt_rank == "auto":
            dt_rank = math.ceil(d_model / 16)
        if not (isinstance(dt_rank, int) and dt_rank >= 1):
            raise ValueError(f"dt_rank must be 'auto' or an integer ≥ 1, got {dt_rank!r}")
        self.d_state, self.d_conv, self.expand, self.dt_rank = d_state, d_conv, expand, dt_rank
        self.d_inner = E = int(expand * d_model)
        self.in_proj = nn.Linear(d_model, 2 * E, bias=False)
        # Padding d_conv - 1 on both sides and keeping the first L outputs makes the conv causal.
        self.conv1d = nn.Conv1d(E, E, d_conv, groups=E, padding=d_conv - 1, bias=True)
        self.x_proj = nn.Linear(E, dt_rank + 2 * d_state, bias=False)
        self.dt_proj_weight = nn.Parameter(torch.empty(E, dt_rank))
        self.dt_proj_bias = nn.Parameter(torch.empty(E))
        self.A_log = nn.Parameter(torch.empty(E, d_state))
        self.D = nn.Parameter(torch.empty(E))
        self.out_proj = nn.Linear(E, d_model, bias=False)
        # Mamba keeps these out of weight decay; an optimiser that reads the flag can honour it.
        self.no_weight_decay(self.dt_proj_bias, self.A_log, self.D)
        self.last_backend = backends.REFERENCE
        self.reset_ssm_parameters()

    def state_size(self, length: int) -> int:
        """The SSM state h [E, N] and the conv's last d_conv - 1 inputs [E, d_conv - 1]; no length."""
        return self.d_inner * self.d_state + self.d_inner * (self.d_conv - 1)

    def init_weights(self, init: WeightInit) -> None:
        for proj in (self.in_proj, self.x_proj, self.out_proj):
            init.linear_(proj)

    @torch.no_grad()
    def reset_ssm_parameters(self) -> None:
        """Mamba's initialisation of the step size, A and D."""
        # dt_proj's weight keeps the low-rank delta's variance independent of dt_rank.
        std = self.dt_rank**-0.5
        nn.init.uniform_(self.dt_proj_weight, -std, std)
        # Initial step sizes log-uniform in [DT_MIN, DT_MAX]; the bias is their inverse softplus,
        # softplus^-1(dt) = log(exp(dt) - 1) = dt + log(1 - exp(-dt)), written to stay exact for
        # small dt.
        log_dt = torch.rand(self.d_inner) * (math.log(DT_MAX) - math.log(DT_MIN)) + math.log(DT_MIN)
        dt = log_dt.exp().clamp(min=DT_FLOOR)
        self.dt_proj_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        # S4D-real: A[:, n] = -(n + 1), a spread of decay rates shared by every channel.
        self.A_log.copy_(torch.arange(1, self.d_state + 1, dtype=torch.float32).log().expand_as(self.A_log))
        self.D.fill_(1.0)

    @property
    def backend(self) -> str:
        """The backend of the latest forward ("reference" before any)."""
        return self.last_backend

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        L = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)  # [B, L, E] each
        u = F.silu(self.conv1d(u.transpose(1, 2))[..., :L].transpose(1, 2))  # [B, L, E]
        dt, B, C = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta_raw = F.linear(dt, self.dt_proj_weight)  # [B, L, E], before bias and softplus
        A = -torch.exp(self.A_log)  # [E, N]
        self.last_backend = backends.choose(x, KERNEL_MODULE)
        if self.last_backend == backends.KERNEL:
            y = selective_scan_kernel(u, delta_raw, A, B, C, self.D, z, self.dt_proj_bias)
        else:
            delta = F.softplus(delta_raw + self.dt_proj_bias)
            y = selective_scan(u, delta, A, B, C, self.D) * F.silu(z)
        return self.out_proj(y)

