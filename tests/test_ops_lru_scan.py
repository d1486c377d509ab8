"""The LRU's log-depth scan against the step loop (the oracle: no maintained library implements the
LRU), in float64 and float32, and under vmap."""

import math

import pytest
import torch

from emergence_bench.mixers.ops.lru_scan import lru_recurrent, lru_scan

GRAD_NAMES = ("b_re", "b_im", "nu_log", "theta_log")


def scan_inputs(B=2, T=37, N=5, dtype=torch.float64, r_min=0.5, r_max=0.999, seed=0):
    """b_re, b_im [B, T, N] and ν, θ [N] with |λ| in [r_min, r_max] and phases in [0, 2π], as leaves."""
    gen = torch.Generator().manual_seed(seed)
    b_re, b_im = (torch.randn(B, T, N, generator=gen, dtype=dtype) for _ in range(2))
    modulus = r_min + (r_max - r_min) * torch.rand(N, generator=gen, dtype=torch.float64)
    nu_log = torch.log(-torch.log(modulus)).to(dtype)
    theta_log = torch.log(2 * math.pi * torch.rand(N, generator=gen, dtype=torch.float64)).to(dtype)
    return [x.requires_grad_() for x in (b_re, b_im, nu_log, theta_log)]


def states_and_grads(fn, inputs, upstream):
    h_re, h_im = fn(*inputs)
    loss = (h_re * upstream[0]).sum() + (h_im * upstream[1]).sum()
    # At T = 1 nothing reads λ: its gradients are zeros (materialised), not an error.
    return (h_re.detach(), h_im.detach()), torch.autograd.grad(loss, inputs, allow_unused=True, materialize_grads=True)


def upstream_for(B, T, N, dtype=torch.float64):
    gen = torch.Generator().manual_seed(1)
    return torch.randn(B, T, N, generator=gen, dtype=dtype), torch.randn(B, T, N, generator=gen, dtype=dtype)


@pytest.mark.parametrize("T", [1, 2, 3, 16, 37, 100])
def test_scan_matches_step_loop_forward_and_gradients_in_float64(T):
    """Lengths at, between and beyond powers of two (the scan's offsets 1, 2, 4, ...)."""
    inputs = scan_inputs(T=T)
    upstream = upstream_for(2, T, 5)
    (ours, grads_ours) = states_and_grads(lru_scan, inputs, upstream)
    (loop, grads_loop) = states_and_grads(lru_recurrent, inputs, upstream)
    for a, b in zip(ours, loop):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-11)
    for name, a, b in zip(GRAD_NAMES, grads_ours, grads_loop):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-10, msg=lambda m, n=name: f"grad {n}: {m}")


def test_scan_is_accurate_in_float32_over_a_long_memory():
    """T = 2048 with |λ| up to 0.9999 (memories longer than the sequence): the float32 scan stays
    within 1e-4 of the float64 loop, relative to the state's scale."""
    inputs = scan_inputs(B=2, T=2048, N=16, r_min=0.99, r_max=0.9999)
    h64 = lru_recurrent(*inputs)
    h32 = lru_scan(*(x.detach().float() for x in inputs))
    assert h32[0].dtype == torch.float32
    for a, b in zip(h32, h64):
        assert ((a.double() - b).abs().max() / b.abs().max()).item() < 1e-4


def test_scan_under_vmap_equals_per_seed_scans():
    """torch.func.vmap over stacked parameters and inputs (how seed-parallel trains K seeds)."""
    seeds = [[x.detach() for x in scan_inputs(T=20, seed=seed)] for seed in range(3)]
    per_seed = [lru_scan(*inputs) for inputs in seeds]
    b_re, b_im, nu, theta = (torch.stack([inputs[j] for inputs in seeds]) for j in range(4))  # [3, ...]
    h_re, h_im = torch.func.vmap(lru_scan)(b_re, b_im, nu, theta)
    for k, (re, im) in enumerate(per_seed):
        torch.testing.assert_close(h_re[k], re, atol=1e-12, rtol=0)
        torch.testing.assert_close(h_im[k], im, atol=1e-12, rtol=0)
