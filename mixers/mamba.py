"""Mamba (Mamba-1): a gated, input-selective diagonal state-space model.

Backends: mamba-ssm's fused CUDA ``selective_scan_fn`` on GPU, else our pure-PyTorch parallel scan.
Both read the same parameters, so a checkpoint moves between them.

The selective scan, per channel d and state n, with h_{-1} = 0::

    h_t[d, n] = exp(delta_t[d] A[d, n]) h_{t-1}[d, n] + delta_t[d] B_t[n] u_t[d]
    y_t[d]    = sum_n C_t[n] h_t[d, n] + D[d] u_t[d]
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.registry import register_mixer
from mixers import backend as backends
from mixers.base import MixerContext, TokenMixer

KERNEL_MODULE = "mamba_ssm.ops.selective_scan_interface"
DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 1e-1, 1e-4  # Mamba's range for the initial step size delta


# ----------------------------------------------------------------------------------------------
# The linear recurrence h_t = a_t h_{t-1} + b_t, computed in parallel over t (time on dim 0).


def _scan_into(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, transpose: bool) -> None:
    """Writes into out [L, *S] the scan of a, b [L, *S] along dim 0 (no autograd):

    forward   (transpose=False): out_t = a_t out_{t-1} + b_t, out_{-1} = 0;
    transpose (transpose=True):  out_t = a_{t+1} out_{t+1} + b_t, out_L = 0 (a_0 is never read).

    The transpose is the forward scan's adjoint, so the backward needs no reversed copies.
    Recursive odd-even (Ladner-Fischer) scan: fold neighbouring pairs with the associative operator
    (a1, b1), (a2, b2) -> (a1 a2, a2 b1 + b2), scan the half-length sequence of pairs into every
    other row of ``out``, then fill in the rest. O(L) work in 2 log2(L) rounds, and it only ever
    multiplies decays (all ≤ 1 for Mamba), so nothing can overflow. Time is the leading dim, so each
    row is one contiguous block and every slice below is a cheap strided view.
    """
    L = a.shape[0]
    if L == 1:
        out.copy_(b)
        return
    if L % 2:  # peel the element the recursion's boundary condition does not involve
        if transpose:
            _scan_into(a[1:], b[1:], out[1:], transpose)
            torch.addcmul(b[0], a[1], out[1], out=out[0])
        else:
            _scan_into(a[:-1], b[:-1], out[:-1], transpose)
            torch.addcmul(b[-1], a[-1], out[-2], out=out[-1])
        return
    a_even, a_odd, b_even, b_odd = a[0::2], a[1::2], b[0::2], b[1::2]  # rows 2k and 2k + 1
    if not transpose:
        # out_{2k+1} = (a_2k a_2k+1) out_{2k-1} + (a_2k+1 b_2k + b_2k+1): a scan over pairs.
        out_odd = out[1::2]
        _scan_into(a_even * a_odd, torch.addcmul(b_odd, a_odd, b_even), out_odd, transpose)
        out[0].copy_(b[0])
        torch.addcmul(b_even[1:], a_even[1:], out_odd[:-1], out=out[2::2])  # out_2k = a_2k out_2k-1 + b_2k
    else:
        # out_2k = (a_2k+1 a_2k+2) out_{2k+2} + (b_2k + a_2k+1 b_2k+1): a transpose scan over pairs
        # whose coefficient for pair k is a_{2k-1} a_{2k}.
        pair_a = torch.empty_like(a_even)
        pair_a[0].fill_(1.0)
        torch.mul(a_odd[:-1], a_even[1:], out=pair_a[1:])
        out_even = out[0::2]
        _scan_into(pair_a, torch.addcmul(b_even, a_odd, b_odd), out_even, transpose)
        out[-1].copy_(b[-1])
        torch.addcmul(b_odd[:-1], a_even[1:], out_even[1:], out=out[1:-1:2])  # out_2k+1 = a_2k+2 out_2k+2 + b_2k+1


def linear_scan(a: torch.Tensor, b: torch.Tensor, transpose: bool = False, out=None) -> torch.Tensor:
    """a, b [L, *S] -> h [L, *S] (see ``_scan_into``); no autograd. ``out`` may be ``b`` itself."""
    out = torch.empty_like(b, memory_format=torch.contiguous_format) if out is None else out
    _scan_into(a, b, out, transpose)
    return out


# ----------------------------------------------------------------------------------------------
# The selective scan: reference (parallel), step-by-step, and the mamba-ssm kernel.


class SelectiveScan(torch.autograd.Function):
    """The selective scan, time-major, with a hand-fused backward.

    u, delta [L, b, d], A [d, n], B, C [L, b, n], D [d] -> y [L, b, d], all of one dtype.
    Saves two [L, b, d, n] tensors (the decays and the states). The backward is one transpose scan
    for g_t = dLoss/dh_t (through all later steps), then, with z_t = delta_t A the log-decay:
    dLoss/dz_t = g_t h_{t-1} exp(z_t), and dLoss/d(delta_t u_t B_t) = g_t.
    """

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D):
        decay = torch.mul(delta.unsqueeze(-1), A).exp_()  # [L, b, d, n], in (0, 1]
        # The drive delta_t u_t B_t as a batched outer product (a broadcast multiply is ~3x slower on
        # CPU), then scanned in place into the states h.
        h = torch.matmul((delta * u).unsqueeze(-1), B.unsqueeze(-2))  # [L, b, d, n]
        linear_scan(decay, h, out=h)
        y = torch.matmul(h, C.unsqueeze(-1)).squeeze(-1).addcmul_(u, D)  # [L, b, d]
        ctx.save_for_backward(u, delta, A, B, C, D, decay, h)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        u, delta, A, B, C, D, decay, h = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        grad_D = (grad_y * u).sum((0, 1))
        grad_C = torch.matmul(grad_y.unsqueeze(-2), h).squeeze(-2)  # sum_d grad_y h: [L, b, n]
        g = torch.matmul(grad_y.unsqueeze(-1), C.unsqueeze(-2))  # dLoss/dh_t via y_t: [L, b, d, n]
        linear_scan(decay, g, transpose=True, out=g)  # ... and via all later steps
        delta_u = delta * u
        grad_delta_u = torch.matmul(g, B.unsqueeze(-1)).squeeze(-1)  # [L, b, d]
        grad_B = torch.matmul(delta_u.unsqueeze(-2), g).squeeze(-2)  # [L, b, n]
        grad_z = g  # overwritten in place with dLoss/d(delta A) = g_t h_{t-1} decay_t
        grad_z[1:].mul_(h[:-1])
        grad_z[0].zero_()  # h_{-1} = 0
        grad_z.mul_(decay)
        scratch = torch.mul(grad_z, delta.unsqueeze(-1))
        grad_A = scratch.sum((0, 1))
        grad_delta = torch.mul(grad_z, A, out=scratch).sum(-1).addcmul_(grad_delta_u, u)
        grad_u = torch.addcmul(grad_y * D, grad_delta_u, delta)
        return grad_u, grad_delta, grad_A, grad_B, grad_C, grad_D


def _compute_dtype(u: torch.Tensor) -> torch.dtype:
    # Half-precision inputs (autocast) are scanned in float32, like mamba-ssm's kernel does.
    return torch.promote_types(u.dtype, torch.float32)


def selective_scan(u, delta, A, B, C, D) -> torch.Tensor:
    """Mamba's selective scan in parallel over time (the reference backend).

    u, delta [b, L, d] (delta already positive), A [d, n] (negative), B, C [b, L, n], D [d]
    -> y [b, L, d] in u's dtype. Runs time-major, so each scan step is a contiguous block.
    """
    dtype, out_dtype = _compute_dtype(u), u.dtype
    A, D = A.to(dtype), D.to(dtype)
    u, delta, B, C = (t.to(dtype).transpose(0, 1).contiguous() for t in (u, delta, B, C))  # [L, b, .]
    return SelectiveScan.apply(u, delta, A, B, C, D).transpose(0, 1).to(out_dtype)


def selective_scan_recurrent(u, delta, A, B, C, D) -> torch.Tensor:
    """The same selective scan, one time step at a time (for tests). Shapes as ``selective_scan``."""
    dtype, out_dtype = _compute_dtype(u), u.dtype
    u, delta, A, B, C, D = (t.to(dtype) for t in (u, delta, A, B, C, D))
    h = u.new_zeros(u.shape[0], u.shape[2], A.shape[1])  # [b, d, n]
    ys = []
    for t in range(u.shape[1]):
        h = torch.exp(delta[:, t, :, None] * A) * h + (delta[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1) + D * u[:, t])
    return torch.stack(ys, dim=1).to(out_dtype)


def _selective_scan_kernel(u, delta_raw, A, B, C, D, z, delta_bias) -> torch.Tensor:
    """mamba-ssm's fused kernel, including softplus(delta_raw + delta_bias) and the gate y * silu(z).

    Our layout is channel-last; the kernel wants u, delta, z as [b, d, L] and input-dependent B, C as
    [b, n, L], all contiguous in L and of one dtype, with A, D and delta_bias in float32.
    u, delta_raw, z [b, L, d], A [d, n], B, C [b, L, n], D, delta_bias [d] -> [b, L, d].
    """
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    dtype = u.dtype if u.dtype in (torch.float16, torch.bfloat16, torch.float32) else torch.float32

    def channel_first(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype).transpose(1, 2).contiguous()

    y = selective_scan_fn(
        channel_first(u), channel_first(delta_raw), A.float(), channel_first(B), channel_first(C),
        D.float(), z=channel_first(z), delta_bias=delta_bias.float(), delta_softplus=True,
    )  # [b, d, L]
    return y.transpose(1, 2)


# ----------------------------------------------------------------------------------------------


@register_mixer("mamba")
class Mamba(TokenMixer):
    """The Mamba-1 block (Gu & Dao, 2023) as a token mixer.

    x [B, L, D] -in_proj-> u, z [B, L, E] (E = d_inner = expand·D)
    u -causal depthwise conv (width d_conv) + SiLU-> u [B, L, E]
    u -x_proj-> dt [B, L, R], B_t, C_t [B, L, N] (R = dt_rank, N = d_state)
    delta = softplus(dt_proj(dt)) [B, L, E];  A = -exp(A_log) [E, N];  D [E]
    y = selective_scan(u, delta, A, B_t, C_t, D) · SiLU(z) [B, L, E] -out_proj-> [B, L, D]

    ``dt_proj`` is held as two plain parameters (``dt_proj_weight`` [E, R], ``dt_proj_bias`` [E]),
    not an nn.Linear, so the model's generic Linear re-initialisation leaves Mamba's step-size
    initialisation in place.
    """

    exposes_attention = False
    backends = (backends.REFERENCE, backends.KERNEL)

    def __init__(self, d_model: int, max_len: int, layer_idx: int, d_state: int = 16, d_conv: int = 4,
                 expand: int = 2, dt_rank: int | str = "auto"):
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
        for p in (self.dt_proj_bias, self.A_log, self.D):
            p._no_weight_decay = True
        self.last_backend = backends.REFERENCE
        self.reset_ssm_parameters()

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
        self.A_log.copy_(torch.log(torch.arange(1, self.d_state + 1, dtype=torch.float32)).expand_as(self.A_log))
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
        A = -torch.exp(self.A_log.float())  # [E, N]
        self.last_backend = backends.choose(x, KERNEL_MODULE)
        if self.last_backend == backends.KERNEL:
            y = _selective_scan_kernel(u, delta_raw, A, B, C, self.D, z, self.dt_proj_bias)
        else:
            delta = F.softplus(delta_raw + self.dt_proj_bias)
            y = selective_scan(u, delta, A, B, C, self.D) * F.silu(z)
        return self.out_proj(y)
