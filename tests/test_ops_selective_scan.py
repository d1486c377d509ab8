"""Mamba's selective scan: the chunked reference (forward, hand-fused backward, vmap rules) against a
plain loop written from the equations, and (on a GPU) mamba-ssm's kernel against the reference."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from emergence_bench.mixers.ops.selective_scan import KERNEL_MODULE, selective_scan, selective_scan_recurrent

# float64: the chunked scan and the loop agree to rounding (~1e-15 seen). float32 against the
# float64 loop: ~1e-7 of the largest value seen, for outputs and every gradient; we allow 1e-5.
TOL64, TOL32 = 1e-10, 1e-5


def oracle_selective_scan(u, delta, A, B, C, D):
    """Written from the equations, one step at a time, independent of emergence_bench.mixers.ops.

    u, delta [b, L, d]; A [d, n]; B, C [b, L, n]; D [d] -> y [b, L, d]:
    h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t,  y_t = C_t h_t + D u_t,  h_{-1} = 0.
    """
    batch, L, d = u.shape
    n = A.shape[1]
    h = torch.zeros(batch, d, n, dtype=u.dtype)
    ys = []
    for t in range(L):
        decay = torch.exp(delta[:, t].reshape(batch, d, 1) * A.reshape(1, d, n))
        drive = (delta[:, t] * u[:, t]).reshape(batch, d, 1) * B[:, t].reshape(batch, 1, n)
        h = decay * h + drive
        ys.append(torch.einsum("bdn,bn->bd", h, C[:, t]) + D * u[:, t])
    return torch.stack(ys, dim=1)


def scan_inputs(batch=2, L=13, d=5, n=3, dtype=torch.float64, delta_scale=1.0, seed=0):
    """Random (u, delta, A, B, C, D) that require grad, with Mamba's signs: delta > 0, A < 0."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, L, d, generator=g)
    delta = F.softplus(torch.randn(batch, L, d, generator=g)) * delta_scale
    A = -torch.exp(torch.randn(d, n, generator=g))
    B = torch.randn(batch, L, n, generator=g)
    C = torch.randn(batch, L, n, generator=g)
    D = torch.randn(d, generator=g)
    return [t.to(dtype).requires_grad_() for t in (u, delta, A, B, C, D)]


def outputs_and_grads(fn, inputs, weight):
    y = fn(*inputs)
    return y, torch.autograd.grad((y * weight).sum(), inputs)


NAMES = ["u", "delta", "A", "B", "C", "D"]


def assert_same_outputs_and_grads(close, y, grads, y_ref, grads_ref, tol):
    """y and every input's gradient against the reference's, each to ``tol`` (``close`` is the
    assert_close_scaled fixture)."""
    close(y, y_ref, tol, "y")
    for name, gradient, gradient_ref in zip(NAMES, grads, grads_ref):
        close(gradient, gradient_ref, tol, f"d{name}")


@pytest.mark.parametrize("L", [1, 4, 13, 16, 37])
def test_selective_scan_matches_oracle_float64(L, assert_close_scaled):
    """Forward and the gradients w.r.t. u, delta, A, B, C, D, to rounding."""
    inputs = scan_inputs(L=L)
    weight = torch.randn(2, L, 5, dtype=torch.float64)
    y, grads = outputs_and_grads(selective_scan, inputs, weight)
    y_ref, grads_ref = outputs_and_grads(oracle_selective_scan, inputs, weight)
    assert_same_outputs_and_grads(assert_close_scaled, y, grads, y_ref, grads_ref, TOL64)


@pytest.mark.parametrize("L, delta_scale", [(40, 1.0), (120, 4.0), (30, 1e-3)])
def test_selective_scan_float32_matches_float64_oracle(L, delta_scale, assert_close_scaled):
    """float32 reference vs the float64 loop on the same numbers, with fast, strong decays
    (delta·|A| up to ~50 per step) and with nearly no decay at all."""
    inputs64 = scan_inputs(L=L, delta_scale=delta_scale)
    inputs32 = [t.detach().float().requires_grad_() for t in inputs64]
    weight = torch.randn(2, L, 5, dtype=torch.float64)
    y, grads = outputs_and_grads(selective_scan, inputs32, weight.float())
    y_ref, grads_ref = outputs_and_grads(oracle_selective_scan, inputs64, weight)
    assert y.dtype == torch.float32 and torch.isfinite(y).all()
    assert_close_scaled(y, y_ref, TOL32, "y")
    for name, gradient, gradient_ref in zip(NAMES, grads, grads_ref):
        assert torch.isfinite(gradient).all(), name
        assert_close_scaled(gradient, gradient_ref, TOL32, f"d{name}")


@pytest.mark.parametrize("L", [1, 10, 25])
def test_chunked_form_matches_module_step_by_step_form(L, assert_close_scaled):
    inputs = scan_inputs(L=L, batch=3, d=4, n=6, seed=1)
    weight = torch.randn(3, L, 4, dtype=torch.float64)
    y, grads = outputs_and_grads(selective_scan, inputs, weight)
    y_rec, grads_rec = outputs_and_grads(selective_scan_recurrent, inputs, weight)
    assert_same_outputs_and_grads(assert_close_scaled, y, grads, y_rec, grads_rec, TOL64)


def test_selective_scan_gradcheck():
    """The hand-written backward against finite differences (independent of any loop)."""
    inputs = scan_inputs(batch=1, L=6, d=2, n=2)
    assert torch.autograd.gradcheck(selective_scan, inputs)


def stacked_scan_inputs(k=2, **kwargs):
    """k independent draws of ``scan_inputs``, stacked on a new leading dim (each requires grad)."""
    draws = [scan_inputs(seed=seed, **kwargs) for seed in range(k)]
    return [torch.stack([d[i].detach() for d in draws]).requires_grad_() for i in range(len(NAMES))]


# in_dims of vmap(selective_scan): all stacked; A and D shared (not vmapped); the sequence shared.
IN_DIMS = [(0,) * 6, (0, 0, None, 0, 0, None), (None, 0, 0, None, 0, 0)]


@pytest.mark.parametrize("in_dims", IN_DIMS)
def test_vmapped_selective_scan_equals_separate_calls(in_dims, assert_close_scaled):
    """vmap over stacked inputs (how seed-parallel training calls it), then autograd outside the
    vmap: values and gradients equal one call per slice; a shared input gets the summed gradient."""
    stacked = stacked_scan_inputs(L=11)
    inputs = [x if d == 0 else x[0].detach().requires_grad_() for x, d in zip(stacked, in_dims)]
    weight = torch.randn(2, 2, 11, 5, dtype=torch.float64)
    y, grads = outputs_and_grads(vmap(selective_scan, in_dims=in_dims), inputs, weight)
    separate = [outputs_and_grads(selective_scan, [x[k] if d == 0 else x for x, d in zip(inputs, in_dims)],
                                  weight[k]) for k in range(2)]
    for k, (y_k, grads_k) in enumerate(separate):
        assert_close_scaled(y[k], y_k, TOL64, f"y[{k}]")
        for name, d, g, g_k in zip(NAMES, in_dims, grads, grads_k):
            if d == 0:
                assert_close_scaled(g[k], g_k, TOL64, f"d{name}[{k}]")
    for name, d, g, i in zip(NAMES, in_dims, grads, range(6)):
        if d is None:
            assert_close_scaled(g, separate[0][1][i] + separate[1][1][i], TOL64, f"d{name} (shared)")


def test_selective_scan_under_func_grad_vmap_of_grad_and_nested_vmap(assert_close_scaled):
    """torch.func.grad of one call equals autograd; vmap of grad (per-slice gradients: the backward
    itself vmapped) and vmap of vmap equal a loop over the slices."""
    inputs = [x.detach() for x in stacked_scan_inputs(k=6, L=9)]
    weight = torch.randn(6, 2, 9, 5, dtype=torch.float64)
    loss_grads = grad(lambda w, *args: (selective_scan(*args) * w).sum(), argnums=tuple(range(1, 7)))
    per_slice = vmap(loss_grads)(weight, *inputs)
    for k in range(6):
        own = [x[k].clone().requires_grad_() for x in inputs]
        _, expected = outputs_and_grads(selective_scan, own, weight[k])
        for name, g_vmap, g_func, g in zip(NAMES, per_slice, loss_grads(weight[k], *own), expected):
            assert_close_scaled(g_func, g, TOL64, f"grad: d{name}[{k}]")
            assert_close_scaled(g_vmap[k], g, TOL64, f"vmap(grad): d{name}[{k}]")
    nested = vmap(vmap(selective_scan))(*[x.unflatten(0, (2, 3)) for x in inputs]).flatten(0, 1)
    for k in range(6):
        assert_close_scaled(nested[k], selective_scan(*[x[k] for x in inputs]), TOL64, f"vmap(vmap): y[{k}]")


def test_selective_scan_runs_half_precision_inputs_in_float32():
    """bf16 in (as under autocast): computed in float32, rounded to bf16 only at the end."""
    inputs = [t.detach().bfloat16() for t in scan_inputs(L=9, dtype=torch.float32)]
    y = selective_scan(*inputs)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, selective_scan(*[t.float() for t in inputs]).bfloat16())


# ------------------------------------------------------------------------------ GPU


@pytest.mark.requires_kernel(KERNEL_MODULE)
def test_kernel_core_op_matches_reference_on_gpu(assert_close_scaled):
    """mamba-ssm's selective_scan_fn (channel-first) against our reference (channel-last), float32."""
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    inputs = [t.detach().float().cuda().requires_grad_() for t in scan_inputs(batch=2, L=100, d=16, n=8)]
    weight = torch.randn(2, 100, 16, device="cuda")

    def kernel(u, delta, A, B, C, D):
        cf = lambda t: t.transpose(1, 2).contiguous()  # noqa: E731
        return selective_scan_fn(cf(u), cf(delta), A, cf(B), cf(C), D).transpose(1, 2)

    y, grads = outputs_and_grads(kernel, inputs, weight)
    y_ref, grads_ref = outputs_and_grads(selective_scan, inputs, weight)
    assert_close_scaled(y, y_ref, 1e-4, "y")
    for name, gradient, gradient_ref in zip(NAMES, grads, grads_ref):
        assert_close_scaled(gradient, gradient_ref, 1e-3, f"d{name}")

