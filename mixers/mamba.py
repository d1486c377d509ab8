"""Mamba (Mamba-1): a gated, input-selective diagonal state-space model.

Backends: mamba-ssm's fused CUDA ``selective_scan_fn`` on GPU, else our pure-PyTorch chunked scan
(``selective_scan``). Both read the same parameters, so a checkpoint moves between them. The
reference works under ``torch.func.vmap`` (seed-parallel training: K seeds' stacked parameters are
one scan); the kernel's autograd.Function has no vmap rule, so seed-parallel falls back there.

The selective scan, per channel d and state n, with h_{-1} = 0::

    h_t[d, n] = exp(delta_t[d] A[d, n]) h_{t-1}[d, n] + delta_t[d] B_t[n] u_t[d]
    y_t[d]    = sum_n C_t[n] h_t[d, n] + D[d] u_t[d]
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.registry import register_mixer
from emergence_bench.mixers import backend as backends
from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.init import WeightInit

KERNEL_MODULE = "mamba_ssm.ops.selective_scan_interface"
DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 1e-1, 1e-4  # Mamba's range for the initial step size delta


# ----------------------------------------------------------------------------------------------
# The linear recurrence h_t = a_t h_{t-1} + b_t, computed chunk-parallel over t (time on dim 0).


def _scan_into(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, transpose: bool) -> None:
    """Writes into out [L, *S] the scan of a, b [L, *S] along dim 0 (no autograd):

    forward   (transpose=False): out_t = a_t out_{t-1} + b_t, out_{-1} = 0;
    transpose (transpose=True):  out_t = a_{t+1} out_{t+1} + b_t, out_L = 0 (a_0 is never read).

    The transpose is the forward scan's adjoint, so the backward needs no time-reversed copies.
    ``out`` may be ``b`` itself (each row of b is read before, or exactly when, it is overwritten).

    Chunked reduce-then-scan: time is cut into nc chunks of T ≈ √L steps. Sweep 1 runs every chunk
    at once from a zero state, keeping only each chunk's final state and the product of its decays;
    a short loop over chunks turns those into the true state entering each chunk; sweep 2 reruns
    the chunks from their true entering states, writing every step. That is about 4√L
    tensor-wide steps, reading a and b twice and writing out once, and it only ever multiplies
    decays (all ≤ 1 for Mamba), so nothing can overflow. Time is the leading dim, so each step is a
    slab of whole rows. The L - nc·T leftover steps (fewer than T) run one by one.
    """
    L = a.shape[0]
    T = max(1, math.isqrt(L))  # chunk length
    nc = L // T
    m = nc * T
    if not transpose:
        a_, b_, h_ = (t[:m].unflatten(0, (nc, T)) for t in (a, b, out))  # [nc, T, *S]
        # Sweep 1, chunks 0..nc-2 (the last one's final state is never needed).
        final = b_[:-1, 0].clone()  # state at the chunk's end, from a zero entering state
        decay = a_[:-1, 0].clone()  # product of the chunk's decays
        for t in range(1, T):
            torch.addcmul(b_[:-1, t], a_[:-1, t], final, out=final)
            decay.mul_(a_[:-1, t])
        for c in range(1, nc - 1):  # true final state of chunk c = state entering chunk c + 1
            final[c].addcmul_(decay[c], final[c - 1])
        # Sweep 2.
        h_[0, 0].copy_(b_[0, 0])
        torch.addcmul(b_[1:, 0], a_[1:, 0], final, out=h_[1:, 0])
        for t in range(1, T):
            torch.addcmul(b_[:, t], a_[:, t], h_[:, t - 1], out=h_[:, t])
        for t in range(m, L):
            torch.addcmul(b[t], a[t], out[t - 1], out=out[t])
    else:
        r = L - m  # the chunks cover the last m steps; the first r run one by one at the end
        a_, b_, g_ = (t[r:].unflatten(0, (nc, T)) for t in (a, b, out))  # [nc, T, *S]
        # Sweep 1, chunks 1..nc-1 (row j is chunk j + 1; chunk 0's first state is never needed).
        first = b_[1:, -1].clone()  # value at the chunk's first step, from zero after its end
        decay = torch.ones_like(first)  # a over the chunk's steps 1..T-1
        for t in range(T - 2, -1, -1):
            torch.addcmul(b_[1:, t], a_[1:, t + 1], first, out=first)
            decay.mul_(a_[1:, t + 1])
        for c in range(nc - 2, 0, -1):  # true first value of chunk c, linked to chunk c+1's by a
            first[c - 1].addcmul_(decay[c - 1] * a_[c + 1, 0], first[c])
        # Sweep 2.
        g_[-1, -1].copy_(b_[-1, -1])
        torch.addcmul(b_[:-1, -1], a_[1:, 0], first, out=g_[:-1, -1])
        for t in range(T - 2, -1, -1):
            torch.addcmul(b_[:, t], a_[:, t + 1], g_[:, t + 1], out=g_[:, t])
        for t in range(r - 1, -1, -1):
            torch.addcmul(b[t], a[t + 1], out[t + 1], out=out[t])


def linear_scan(a: torch.Tensor, b: torch.Tensor, transpose: bool = False, out=None) -> torch.Tensor:
    """a, b [L, *S] -> h [L, *S] (see ``_scan_into``); no autograd. ``out`` may be ``b`` itself."""
    out = torch.empty_like(b, memory_format=torch.contiguous_format) if out is None else out
    _scan_into(a, b, out, transpose)
    return out


# ----------------------------------------------------------------------------------------------
# The selective scan: reference (chunked), step-by-step, and the mamba-ssm kernel.


def _scan_forward(u, delta, A, B, C, D):
    """The selective scan, time-major: u, delta [L, *S, d], A [*P, d, n], B, C [L, *S, n], D [*P, d]
    -> (y [L, *S, d], states h [L, *S, n, d], decays [L, *S, n, d]), all of one dtype, where A and D
    broadcast against S. One model is S = (b,), P = (); K vmapped seeds are S = (K, b), P = (K, 1).
    The decays and states have channels innermost, so the broadcasts over n and the contractions
    over n or d are fast on CPU; they are what the backward needs."""
    # Time-major slabs for the scan: contiguous (a no-op for selective_scan's own inputs).
    u, delta, B, C = (t.contiguous() for t in (u, delta, B, C))
    A_t = A.transpose(-1, -2).contiguous()  # [*P, n, d]; or the product below is laid out d-major
    decay = torch.mul(delta.unsqueeze(-2), A_t).exp_()  # [L, *S, n, d], in (0, 1]
    h = torch.mul(B.unsqueeze(-1), (delta * u).unsqueeze(-2))  # the drive delta_t B_t u_t ...
    linear_scan(decay, h, out=h)  # ... scanned in place into the states [L, *S, n, d]
    y = torch.matmul(C.unsqueeze(-2), h).squeeze(-2).addcmul_(u, D)  # sum_n C h + D u: [L, *S, d]
    return y, h, decay


def _sum_over_time_and_broadcast(x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """x [L, *S, ·] summed to ``shape`` (a parameter's [*P, ·]): over time first, then the rest.
    One ``sum_to_size`` does the same, but some 20x slower where the dims it sums are not adjacent
    (vmapped: S = (K, b), P = (K, 1))."""
    return x.sum(0).sum_to_size(shape)


def _scan_backward(grad_y, u, delta, A, B, C, D, decay, h):
    """The hand-fused backward of ``_scan_forward``: grad_y, its inputs, decays and states -> the
    gradients of u, delta, A, B, C, D. One transpose scan for g_t = dLoss/dh_t (through all later
    steps), then, with z_t = delta_t A the log-decay: dLoss/dz_t = g_t h_{t-1} exp(z_t), and
    dLoss/d(delta_t u_t B_t) = g_t."""
    u, delta, B, C, grad_y = (t.contiguous() for t in (u, delta, B, C, grad_y))
    grad_D = _sum_over_time_and_broadcast(grad_y * u, D.shape)  # [*P, d]
    grad_C = torch.matmul(h, grad_y.unsqueeze(-1)).squeeze(-1)  # sum_d h grad_y: [L, *S, n]
    g = torch.mul(C.unsqueeze(-1), grad_y.unsqueeze(-2))  # dLoss/dh_t via y_t: [L, *S, n, d]
    linear_scan(decay, g, transpose=True, out=g)  # ... and via all later steps
    delta_u = delta * u
    grad_delta_u = torch.matmul(B.unsqueeze(-2), g).squeeze(-2)  # sum_n B g: [L, *S, d]
    grad_B = torch.matmul(g, delta_u.unsqueeze(-1)).squeeze(-1)  # sum_d g delta u: [L, *S, n]
    grad_z = g  # overwritten in place with dLoss/d(delta A) = g_t h_{t-1} decay_t
    grad_z[1:].mul_(h[:-1])
    grad_z[0].zero_()  # h_{-1} = 0
    grad_z.mul_(decay)
    # grad_A = sum over (L, b) of grad_z delta, a block of time steps at a time: a small scratch
    # that stays in cache instead of one more [L, *S, n, d] tensor.
    block = max(1, (1 << 18) // max(1, grad_z[0].numel()))
    A_t = A.transpose(-1, -2).contiguous()  # [*P, n, d]
    grad_A_t = torch.zeros_like(A_t)
    scratch = torch.empty_like(grad_z[:block])
    for t in range(0, grad_z.shape[0], block):
        rows = slice(t, t + block)
        part = torch.mul(grad_z[rows], delta[rows].unsqueeze(-2), out=scratch[: grad_z[rows].shape[0]])
        grad_A_t += _sum_over_time_and_broadcast(part, A_t.shape)
    grad_delta = grad_z.mul_(A_t).sum(-2).addcmul_(grad_delta_u, u)  # sum_n grad_z A + ...
    grad_u = torch.addcmul(grad_y * D, grad_delta_u, delta)
    return grad_u, grad_delta, grad_A_t.transpose(-1, -2), grad_B, grad_C, grad_D


class EagerSelectiveScan(torch.autograd.Function):
    """``_scan_forward`` with its backward, for plain (eager) autograd: the classic form, which
    Function.apply runs without the argument binding (``inspect.signature``) that it does for the
    torch.func form on every call, some 60 µs, about 8% of a tiny scan's forward and backward.
    Not usable under torch.func transforms; ``SelectiveScan`` is the same scan for those."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D):
        y, h, decay = _scan_forward(u, delta, A, B, C, D)
        ctx.save_for_backward(u, delta, A, B, C, D, decay, h)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        return _scan_backward(grad_y, *ctx.saved_tensors)


# Under torch.func.vmap, the two Functions below fold the vmapped dim into the broadcast dims, so K
# seeds are one call, not a loop over them: "time"-major tensors [L, *S, ·] get it at dim 1,
# parameters A [*P, d, n] and D [*P, d] at dim 0, padded with size-1 dims so that they broadcast.


def _vmap_physical(batch_size: int, tensors, in_dims, kinds) -> tuple[list[torch.Tensor], list[torch.Size]]:
    """A vmap rule's physical tensors with the vmapped dim (any position; None: not vmapped, then
    expanded) at dim 1 of "time" tensors and dim 0 of the others, "A" and "D" padded to broadcast
    -> (those tensors, each one's shape before padding)."""
    moved, shapes = [], []
    for x, dim, kind in zip(tensors, in_dims, kinds):
        front = 1 if kind == "time" else 0
        if dim is None:
            x = x.unsqueeze(front).expand(*x.shape[:front], batch_size, *x.shape[front:])
        else:
            x = x.movedim(dim, front)
        moved.append(x)
        shapes.append(x.shape)
    ndim = moved[kinds.index("time")].dim()  # the first time tensor, u or grad_y: [L, K, *S, d]
    for i, (x, kind) in enumerate(zip(moved, kinds)):
        if kind != "time":  # A [K, *P, d, n] -> [K, 1.., *P, d, n] (ndim dims); D the same, less n
            target = ndim if kind == "A" else ndim - 1
            moved[i] = x[(slice(None),) + (None,) * (target - x.dim())]
    return moved, shapes


_SCAN_KINDS = ("time", "time", "A", "time", "time", "D")  # u, delta, A, B, C, D


def _transforms_active() -> bool:
    """Whether a torch.func transform (vmap, grad, ...) is running. torch's own check (the one
    Function.apply makes); where a torch lacks it, assume one is, the form that works either way."""
    check = getattr(torch._C, "_are_functorch_transforms_active", None)
    return True if check is None else check()


class SelectiveScan(torch.autograd.Function):
    """``_scan_forward`` with its backward, in the torch.func form (``forward`` without ctx,
    ``setup_context``, a ``vmap`` rule): under vmap with autograd outside it (how seed-parallel
    trains), under ``torch.func.grad``, and under vmap of ``torch.func.grad`` (then the backward
    runs as ``SelectiveScanGrad``, which has a vmap rule too). Returns (y, h, decay); h and
    decay are not differentiable, and are outputs only because they are what the backward saves."""

    @staticmethod
    def forward(u, delta, A, B, C, D):
        return _scan_forward(u, delta, A, B, C, D)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, h, decay = output
        ctx.save_for_backward(*inputs, decay, h)
        ctx.mark_non_differentiable(h, decay)
        ctx.set_materialize_grads(False)  # no zero-filled [L, *S, n, d] gradients for h and decay

    @staticmethod
    def vmap(info, in_dims, *inputs):
        physical, _ = _vmap_physical(info.batch_size, inputs, in_dims, _SCAN_KINDS)
        return SelectiveScan.apply(*physical), (1, 1, 1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, _grad_h, _grad_decay):
        if grad_y is None:
            return (None,) * 6
        if _transforms_active():  # e.g. vmap over torch.func.grad: grad_y and the saved are batched
            return SelectiveScanGrad.apply(grad_y, *ctx.saved_tensors)
        return _scan_backward(grad_y, *ctx.saved_tensors)  # autograd outside a vmapped forward


class SelectiveScanGrad(torch.autograd.Function):
    """``_scan_backward`` as an op with a vmap rule. Not differentiable (the scan is
    differentiable once)."""

    KINDS = ("time", *_SCAN_KINDS, "time", "time")  # grad_y, u, delta, A, B, C, D, decay, h

    @staticmethod
    def forward(*args):
        return _scan_backward(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(*output)

    @staticmethod
    def vmap(info, in_dims, *inputs):
        physical, shapes = _vmap_physical(info.batch_size, inputs, in_dims, SelectiveScanGrad.KINDS)
        grad_u, grad_delta, grad_A, grad_B, grad_C, grad_D = SelectiveScanGrad.apply(*physical)
        # A's and D's gradients lose the padding: [K, 1.., *P, d, n] -> [K, *P, d, n].
        grads = grad_u, grad_delta, grad_A.reshape(shapes[3]), grad_B, grad_C, grad_D.reshape(shapes[6])
        return grads, (1, 1, 0, 1, 1, 0)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("the reference selective scan is differentiable once (no double backward)")


def _compute_dtype(u: torch.Tensor) -> torch.dtype:
    # Half-precision inputs (autocast) are scanned in float32, like mamba-ssm's kernel does.
    return torch.promote_types(u.dtype, torch.float32)


def selective_scan(u, delta, A, B, C, D) -> torch.Tensor:
    """Mamba's selective scan, chunk-parallel over time (the reference backend).

    u, delta [b, L, d] (delta already positive), A [d, n] (negative), B, C [b, L, n], D [d]
    -> y [b, L, d] in u's dtype. Memory: two [L, b, n, d] tensors kept for the backward.
    Vmappable, forward and backward: K vmapped calls are one scan over K·b sequences.
    """
    dtype, out_dtype = _compute_dtype(u), u.dtype
    A, D = A.to(dtype), D.to(dtype)
    u, delta, B, C = (t.to(dtype).transpose(0, 1).contiguous() for t in (u, delta, B, C))  # [L, b, .]
    if _transforms_active():  # e.g. seed-parallel's vmap over the seeds
        y, _, _ = SelectiveScan.apply(u, delta, A, B, C, D)
    else:
        y = EagerSelectiveScan.apply(u, delta, A, B, C, D)
    return y.transpose(0, 1).to(out_dtype)


def selective_scan_recurrent(u, delta, A, B, C, D, return_state: bool = False):
    """The same selective scan, one time step at a time, straight from the equations (the tests
    check ``selective_scan`` against it). Shapes as ``selective_scan``; with ``return_state``, also
    the final state: (y, h [b, d, n])."""
    dtype, out_dtype = _compute_dtype(u), u.dtype
    u, delta, A, B, C, D = (t.to(dtype) for t in (u, delta, A, B, C, D))
    h = u.new_zeros(u.shape[0], u.shape[2], A.shape[1])  # [b, d, n]
    ys = []
    for t in range(u.shape[1]):
        h = torch.exp(delta[:, t, :, None] * A) * h + (delta[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1) + D * u[:, t])
    y = torch.stack(ys, dim=1).to(out_dtype)
    return (y, h) if return_state else y


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
    return y.transpose(1, 2).to(u.dtype)


# ----------------------------------------------------------------------------------------------


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
            y = _selective_scan_kernel(u, delta_raw, A, B, C, self.D, z, self.dt_proj_bias)
        else:
            delta = F.softplus(delta_raw + self.dt_proj_bias)
            y = selective_scan(u, delta, A, B, C, self.D) * F.silu(z)
        return self.out_proj(y)
