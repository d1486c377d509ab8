"""Mamba's selective scan: the chunked reference (with its hand-fused backward, autograd Functions and
vmap rules), the step-by-step recurrence the tests hold it to, and mamba-ssm's fused kernel.

Per channel d and state n, with h_{-1} = 0::

    h_t[d, n] = exp(delta_t[d] A[d, n]) h_{t-1}[d, n] + delta_t[d] B_t[n] u_t[d]
    y_t[d]    = sum_n C_t[n] h_t[d, n] + D[d] u_t[d]

The reference works under ``torch.func.vmap`` (seed-parallel training: K seeds' stacked parameters
are one scan); the kernel's autograd.Function has no vmap rule, so seed-parallel falls back there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import torch

from emergence_bench.mixers.ops.linear_scan import linear_scan

KERNEL_MODULE = "mamba_ssm.ops.selective_scan_interface"


def _scan_forward(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                  D: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def _scan_backward(grad_y: torch.Tensor, u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                   C: torch.Tensor, D: torch.Tensor, decay: torch.Tensor, h: torch.Tensor,
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
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
    # grad_A = sum over (L, b) of grad_z delta, one time step at a time: a small scratch that stays
    # in cache instead of one more [L, *S, n, d] tensor. One step, not a block sized by the tensor:
    # with K seeds batched that block would change with K, and so would the order of a seed's sum.
    A_t = A.transpose(-1, -2).contiguous()  # [*P, n, d]
    grad_A_t = torch.zeros_like(A_t)
    scratch = torch.empty_like(grad_z[:1])
    for t in range(grad_z.shape[0]):
        part = torch.mul(grad_z[t:t + 1], delta[t:t + 1].unsqueeze(-2), out=scratch)
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
    def forward(ctx: Any, u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                D: torch.Tensor) -> torch.Tensor:
        y, h, decay = _scan_forward(u, delta, A, B, C, D)
        ctx.save_for_backward(u, delta, A, B, C, D, decay, h)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _scan_backward(grad_y, *ctx.saved_tensors)


# Under torch.func.vmap, the two Functions below fold the vmapped dim into the broadcast dims, so K
# seeds are one call, not a loop over them: "time"-major tensors [L, *S, ·] get it at dim 1,
# parameters A [*P, d, n] and D [*P, d] at dim 0, padded with size-1 dims so that they broadcast.


def _vmap_physical(batch_size: int, tensors: Sequence[torch.Tensor], in_dims: Sequence[int | None],
                   kinds: Sequence[str]) -> tuple[list[torch.Tensor], list[torch.Size]]:
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
    def forward(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                D: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _scan_forward(u, delta, A, B, C, D)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...],
                      output: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        _, h, decay = output
        ctx.save_for_backward(*inputs, decay, h)
        ctx.mark_non_differentiable(h, decay)
        ctx.set_materialize_grads(False)  # no zero-filled [L, *S, n, d] gradients for h and decay

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...],
             *inputs: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], tuple[int, int, int]]:
        physical, _ = _vmap_physical(info.batch_size, inputs, in_dims, _SCAN_KINDS)
        return SelectiveScan.apply(*physical), (1, 1, 1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_y: torch.Tensor | None, _grad_h: torch.Tensor | None,
                 _grad_decay: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
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
    def forward(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _scan_backward(*args)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: tuple[torch.Tensor, ...]) -> None:
        ctx.mark_non_differentiable(*output)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...],
             *inputs: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...]]:
        physical, shapes = _vmap_physical(info.batch_size, inputs, in_dims, SelectiveScanGrad.KINDS)
        grad_u, grad_delta, grad_A, grad_B, grad_C, grad_D = SelectiveScanGrad.apply(*physical)
        # A's and D's gradients lose the padding: [K, 1.., *P, d, n] -> [K, *P, d, n].
        grads = grad_u, grad_delta, grad_A.reshape(shapes[3]), grad_B, grad_C, grad_D.reshape(shapes[6])
        return grads, (1, 1, 0, 1, 1, 0)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> NoReturn:
        raise RuntimeError("the reference selective scan is differentiable once (no double backward)")


def _compute_dtype(u: torch.Tensor) -> torch.dtype:
    # Half-precision inputs (autocast) are scanned in float32, like mamba-ssm's kernel does.
    return torch.promote_types(u.dtype, torch.float32)


def selective_scan(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   D: torch.Tensor) -> torch.Tensor:
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


def selective_scan_recurrent(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                             D: torch.Tensor,
                             return_state: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
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


def selective_scan_kernel(u: torch.Tensor, delta_raw: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                          D: torch.Tensor, z: torch.Tensor, delta_bias: torch.Tensor) -> torch.Tensor:
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
