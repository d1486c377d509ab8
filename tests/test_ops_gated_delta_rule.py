"""The gated delta rule: the chunked reference against fla's naive functions and our step-by-step
loop, and (on a GPU) fla's kernel against the reference."""

import math
import warnings

import pytest
import torch

from emergence_bench.mixers.ops.gated_delta_rule import (
    KERNEL_MODULE,
    gated_delta_rule_chunked,
    gated_delta_rule_kernel,
    gated_delta_rule_recurrent,
    l2_normalize,
)

with warnings.catch_warnings():  # fla warns that Triton has no driver on a CPU machine
    warnings.simplefilter("ignore")
    from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule, naive_recurrent_gated_delta_rule

GRAD_NAMES = ("q", "k", "v", "g", "beta")


def core_inputs(B=2, T=37, H=3, K=8, V=6, dtype=torch.float32, seed=0, strong_decay=False):
    """q, k (unit norm), v [B, T, H, K|V], g (≤ 0) and beta (0..1) [B, T, H], as leaves with grads."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=dtype)
    k = l2_normalize(torch.randn(B, T, H, K, generator=gen, dtype=dtype))
    v = torch.randn(B, T, H, V, generator=gen, dtype=dtype)
    g = -torch.rand(B, T, H, generator=gen, dtype=dtype) * (30.0 if strong_decay else 1.0)
    beta = torch.rand(B, T, H, generator=gen, dtype=dtype)
    return [x.requires_grad_() for x in (q, k, v, g, beta)]


# float32 tolerances against fla's naive functions (which compute in float32 themselves): outputs
# and gradients are O(1), and the two orders of summation differ by a few ulps per step.
F32_ATOL, F32_RTOL = 2e-5, 1e-4


@pytest.mark.parametrize("T, chunk_size", [(37, 16), (20, 64), (64, 32)])
@pytest.mark.parametrize("oracle", ["recurrent", "chunk"])
def test_chunked_reference_matches_fla_naive_forward_and_gradients(T, chunk_size, oracle, output_and_grads,
                                                                   assert_outputs_and_grads_close):
    """Several chunks with a padded tail, one chunk longer than T, and an exact multiple."""
    inputs = core_inputs(T=T)
    upstream = torch.randn(2, T, 3, 6, generator=torch.Generator().manual_seed(1))

    def naive(q, k, v, g, beta):
        if oracle == "recurrent":  # note fla's argument order: beta before g
            return naive_recurrent_gated_delta_rule(q, k, v, beta, g)[0]
        return naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=16)[0]

    ours = output_and_grads(lambda *x: gated_delta_rule_chunked(*x, chunk_size=chunk_size), inputs, upstream)
    theirs = output_and_grads(naive, inputs, upstream)
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol=F32_ATOL, rtol=F32_RTOL)


def test_step_by_step_form_matches_fla_naive_recurrent(output_and_grads, assert_outputs_and_grads_close):
    inputs = core_inputs(T=11)
    upstream = torch.randn(2, 11, 3, 6, generator=torch.Generator().manual_seed(1))
    ours = output_and_grads(gated_delta_rule_recurrent, inputs, upstream)
    theirs = output_and_grads(lambda q, k, v, g, b: naive_recurrent_gated_delta_rule(q, k, v, b, g)[0],
                              inputs, upstream)
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol=F32_ATOL, rtol=F32_RTOL)


@pytest.mark.parametrize("T, chunk_size", [(1, 32), (23, 4), (23, 8), (40, 64)])
@pytest.mark.parametrize("strong_decay", [False, True])
def test_chunked_matches_step_by_step_in_float64(T, chunk_size, strong_decay, output_and_grads,
                                                 assert_outputs_and_grads_close):
    """Tight agreement in float64, also with decays down to exp(-30) per step (in-chunk cumulative
    log-decays far below float range if they were exponentiated on their own)."""
    inputs = core_inputs(T=T, dtype=torch.float64, strong_decay=strong_decay)
    upstream = torch.randn(2, T, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ours = output_and_grads(lambda *x: gated_delta_rule_chunked(*x, chunk_size=chunk_size), inputs, upstream)
    theirs = output_and_grads(gated_delta_rule_recurrent, inputs, upstream)
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol=1e-10, rtol=1e-10)


def test_chunked_is_finite_and_accurate_in_float32_under_strong_decay(output_and_grads, assert_outputs_and_grads_close):
    inputs = core_inputs(T=70, strong_decay=True)
    with torch.no_grad():
        inputs[3][:, 10:40] = -80.0  # exp(-80 · 30) underflows to 0 in any dtype
    upstream = torch.randn(2, 70, 3, 6, generator=torch.Generator().manual_seed(1))
    ours = output_and_grads(lambda *x: gated_delta_rule_chunked(*x, chunk_size=64), inputs, upstream)
    assert torch.isfinite(ours[0]).all() and all(torch.isfinite(g).all() for g in ours[1])
    theirs = output_and_grads(gated_delta_rule_recurrent, inputs, upstream)
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol=F32_ATOL, rtol=F32_RTOL)


def test_chunked_keeps_input_dtype_and_scale_argument():
    q, k, v, g, beta = (x.detach() for x in core_inputs(T=9))
    o = gated_delta_rule_chunked(q, k, v, g, beta, scale=0.25)
    assert o.dtype == torch.float32 and o.shape == (2, 9, 3, 6)
    recurrent = gated_delta_rule_recurrent(q, k, v, g, beta, scale=0.25)
    torch.testing.assert_close(o, recurrent, atol=1e-5, rtol=1e-4)
    # The output is linear in q and scale is applied once, so the default K^-0.5 rescales it.
    default = gated_delta_rule_chunked(q, k, v, g, beta)
    torch.testing.assert_close(default, o * 4 / math.sqrt(8), atol=1e-5, rtol=1e-4)


# ---- GPU: the fla kernel against the reference -------------------------------------------------------

# The kernel's tl.dot runs float32 inputs in TF32 on recent GPUs (10-bit mantissa), so we compare
# relative errors ‖a - b‖ / ‖b‖ per tensor rather than elementwise float32 tolerances.
GPU_REL_TOL = 5e-3


@pytest.mark.requires_kernel(KERNEL_MODULE)
def test_kernel_core_matches_reference_core(output_and_grads, relative_error):
    """The core op alone, with gradients w.r.t. q, k, v, g and beta."""
    inputs = [x.detach().cuda().requires_grad_() for x in core_inputs(B=2, T=150, H=4, K=16, V=32)]
    upstream = torch.randn(2, 150, 4, 32, device="cuda")
    (o_k, grads_k) = output_and_grads(gated_delta_rule_kernel, inputs, upstream)
    (o_r, grads_r) = output_and_grads(gated_delta_rule_chunked, inputs, upstream)
    assert relative_error(o_k, o_r) < GPU_REL_TOL
    for name, a, b in zip(GRAD_NAMES, grads_k, grads_r):
        assert relative_error(a, b) < GPU_REL_TOL, name
