"""The mLSTM cell: the parallel reference against mlstm-kernels' native PyTorch functions and our
step-by-step loop, the kernel wrapper's padding on CPU, and (on a GPU) mlstm-kernels' kernel against
the reference."""

import math

import pytest
import torch
import torch.nn.functional as F

from emergence_bench.mixers.ops.mlstm import (
    EPS,
    KERNEL_MODULE,
    mlstm_chunkwise,
    mlstm_kernel,
    mlstm_parallel,
    mlstm_recurrent,
)

try:  # the oracle: NX-AI's mlstm-kernels (dev extra; NXAI Community License, so never a core dependency)
    from mlstm_kernels.torch.parallel.native_stablef import mlstm_parallel__native_stablef_autograd
    from mlstm_kernels.torch.recurrent.native_sequence import mlstm_recurrent_sequence__native_fw
except ImportError:  # e.g. Python 3.10, where mlstm-kernels does not install
    mlstm_parallel__native_stablef_autograd = mlstm_recurrent_sequence__native_fw = None
needs_oracle = pytest.mark.skipif(mlstm_parallel__native_stablef_autograd is None,
                                  reason="needs mlstm-kernels (the dev extra)")

GRAD_NAMES = ("q", "k", "v", "i", "f")


def core_inputs(B=2, T=29, H=3, K=8, V=6, dtype=torch.float32, seed=0):
    """q, k [B, T, H, K], v [B, T, H, V] and the gate pre-activations ĩ, f̃ [B, T, H], as leaves.
    ĩ spans about e^±9 and f̃ forget values from 0.1 to 0.9999, so the stabiliser matters."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=gen, dtype=dtype) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=gen, dtype=dtype)
    i = 3 * torch.randn(B, T, H, generator=gen, dtype=dtype)
    f = 2 + 2 * torch.randn(B, T, H, generator=gen, dtype=dtype)
    return [x.requires_grad_() for x in (q, k, v, i, f)]


def ours_sigmoid(core, eps=EPS):
    """Our core op with the sigmoid forget gate, taking f̃ as mlstm-kernels does."""
    return lambda q, k, v, i, f: core(q, k, v, i, F.logsigmoid(f), eps=eps)


def heads_first(fn):
    """mlstm-kernels' layout is [B, H, T, *]: wrap fn to take and return ours, [B, T, H, *]."""
    return lambda *xs: fn(*(x.transpose(1, 2) for x in xs)).transpose(1, 2)


def upstream_for(T, H=3, V=6, dtype=torch.float32):
    return torch.randn(2, T, H, V, dtype=dtype, generator=torch.Generator().manual_seed(1))


@needs_oracle
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("T", [1, 29, 64])
def test_parallel_form_matches_mlstm_kernels_parallel_forward_and_gradients(T, dtype, tol, output_and_grads,
                                                                            assert_outputs_and_grads_close):
    inputs = core_inputs(T=T, dtype=dtype)
    upstream = upstream_for(T, dtype=dtype)
    oracle = heads_first(lambda q, k, v, i, f: mlstm_parallel__native_stablef_autograd(q, k, v, i, f, eps=EPS))
    ours = output_and_grads(ours_sigmoid(mlstm_parallel), inputs, upstream)
    theirs = output_and_grads(oracle, inputs, upstream)
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol=tol, rtol=tol)


@needs_oracle
@pytest.mark.parametrize("T", [1, 17, 40])
def test_parallel_form_matches_mlstm_kernels_recurrent_sequence(T, output_and_grads, assert_outputs_and_grads_close):
    """Their loop starts its stabiliser at m = 0, ours at the row maximum; h does not depend on m
    except through eps, so with eps = 0 the two agree to float64 rounding."""
    inputs = core_inputs(T=T, dtype=torch.float64)
    upstream = upstream_for(T, dtype=torch.float64)

    def oracle(q, k, v, i, f):
        return mlstm_recurrent_sequence__native_fw(q, k, v, i, f, eps=0.0, dtype_state=torch.float64)

    ours = output_and_grads(ours_sigmoid(mlstm_parallel, eps=0.0), inputs, upstream)
    theirs = output_and_grads(heads_first(oracle), inputs, upstream)
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol=1e-10, rtol=1e-10)


def with_gate(core, forget_gate: str):
    """``core`` taking the forget gate's pre-activation f̃: the sigmoid gate, or the exp gate with
    f > 1 on some steps (a memory that grows)."""
    def fn(q, k, v, i, f):
        log_f = F.logsigmoid(f) if forget_gate == "sigmoid" else 0.1 * f - 0.3
        return core(q, k, v, i, log_f)
    return fn


@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
@pytest.mark.parametrize("T", [1, 17, 40])
def test_parallel_form_matches_step_by_step_in_float64(T, forget_gate, output_and_grads,
                                                       assert_outputs_and_grads_close):
    """Both forget gates; the exp gate with f > 1 on some steps (a memory that grows)."""
    inputs = core_inputs(T=T, dtype=torch.float64)
    upstream = upstream_for(T, dtype=torch.float64)

    ours = output_and_grads(with_gate(mlstm_parallel, forget_gate), inputs, upstream)
    theirs = output_and_grads(with_gate(mlstm_recurrent, forget_gate), inputs, upstream)
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
@pytest.mark.parametrize("T, chunk", [(1, 16), (16, 16), (17, 16), (40, 16), (40, 7), (65, 64), (130, 32)])
def test_chunkwise_form_matches_step_by_step_in_float64(T, chunk, forget_gate, output_and_grads,
                                                        assert_outputs_and_grads_close):
    """Lengths that are and are not a multiple of the chunk, one chunk and many; both forget gates,
    the exp gate with f > 1 on some steps."""
    inputs = core_inputs(T=T, dtype=torch.float64)
    upstream = upstream_for(T, dtype=torch.float64)

    chunkwise = lambda *xs: mlstm_chunkwise(*xs, chunk_size=chunk)  # noqa: E731
    ours = output_and_grads(with_gate(chunkwise, forget_gate), inputs, upstream)
    theirs = output_and_grads(with_gate(mlstm_recurrent, forget_gate), inputs, upstream)
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol=1e-10, rtol=1e-10)


def test_chunkwise_stabiliser_keeps_overflowing_gates_exact_in_float32(output_and_grads, relative_error):
    """As the parallel form's test below, across chunk boundaries: the state carried from chunk to
    chunk is stored scaled, so e^120 of growth over 120 steps stays finite and exact."""
    q, k, v, i, f = (x.detach() for x in core_inputs(T=120))
    q, k = q.abs(), k.abs()
    i = 150 + 20 * torch.randn(i.shape, generator=torch.Generator().manual_seed(2))
    log_f = torch.ones_like(f)
    inputs32 = [x.clone().requires_grad_() for x in (q, k, v, i, log_f)]
    inputs64 = [x.double().requires_grad_() for x in (q, k, v, i, log_f)]
    upstream = upstream_for(120)
    h32, grads32 = output_and_grads(lambda *xs: mlstm_chunkwise(*xs, chunk_size=32), inputs32, upstream)
    h64, grads64 = output_and_grads(mlstm_recurrent, inputs64, upstream.double())
    assert torch.isfinite(h32).all() and all(torch.isfinite(g).all() for g in grads32)
    for name, a, b in zip(("h", *GRAD_NAMES), (h32, *grads32), (h64, *grads64)):
        assert relative_error(a.double(), b) < 2e-5, name


def test_stabiliser_keeps_overflowing_gates_exact_in_float32(output_and_grads, relative_error):
    """ĩ near 150 (exp(ĩ) overflows float32 at 88) and an exp forget gate at e^1 per step over 120
    steps (e^120 of growth): the float32 forward and gradients are finite and agree with float64."""
    q, k, v, i, f = (x.detach() for x in core_inputs(T=120))
    q, k = q.abs(), k.abs()  # q·k > 0: no row's normaliser near 0, whose conditioning is not at issue here
    i = 150 + 20 * torch.randn(i.shape, generator=torch.Generator().manual_seed(2))
    log_f = torch.ones_like(f)
    inputs32 = [x.clone().requires_grad_() for x in (q, k, v, i, log_f)]
    inputs64 = [x.double().requires_grad_() for x in (q, k, v, i, log_f)]
    upstream = upstream_for(120)
    h32, grads32 = output_and_grads(mlstm_parallel, inputs32, upstream)
    h64, grads64 = output_and_grads(mlstm_recurrent, inputs64, upstream.double())
    assert torch.isfinite(h32).all() and all(torch.isfinite(g).all() for g in grads32)
    for name, a, b in zip(("h", *GRAD_NAMES), (h32, *grads32), (h64, *grads64)):
        assert relative_error(a.double(), b) < 2e-5, name


def test_normaliser_floor_is_one_and_output_keeps_input_dtype():
    """A tiny input gate (e^-20) stores almost nothing, so |nᵀq̂| ≪ 1 and the normaliser is its
    floor 1: h_t = Σ_s f_{s+1}⋯f_t i_s (q̂_t·k_s) v_s, the unstabilised sum, term by term. In
    bfloat16 the output stays bfloat16."""
    q, k, v, i, f = (x.detach().double() for x in core_inputs(T=9))
    i, log_f = torch.full_like(i, -20.0), F.logsigmoid(f)
    expected = torch.zeros(2, 9, 3, 6, dtype=torch.float64)
    for t in range(9):
        for s in range(t + 1):
            weight = torch.exp(log_f[:, s + 1:t + 1].sum(1) + i[:, s])  # [B, H]
            expected[:, t] += (weight * (q[:, t] * k[:, s]).sum(-1) / math.sqrt(8))[..., None] * v[:, s]
    torch.testing.assert_close(mlstm_parallel(q, k, v, i, log_f, eps=0.0), expected, atol=0, rtol=1e-10)
    assert mlstm_parallel(*(x.bfloat16() for x in (q, k, v, i, log_f))).dtype == torch.bfloat16


@needs_oracle
@pytest.mark.parametrize("T, K, V", [(5, 8, 6), (37, 16, 16), (100, 12, 20), (128, 32, 64)])
def test_kernel_wrapper_gives_the_kernel_valid_shapes_and_our_numbers(monkeypatch, T, K, V, output_and_grads,
                                                                      relative_error):
    """The GPU path's padding and q rescaling, on CPU: the Triton kernel is stood in for by
    mlstm-kernels' native parallel function, which has the kernel's contract ([B, H, T, *], f̃ through
    logsigmoid, q·k scaled by the padded K^-0.5), after checking the shapes the kernel accepts."""
    import mlstm_kernels.torch.chunkwise.triton_xl_chunk as xl_chunk

    seen = []

    def stand_in(q, k, v, i, f, eps, return_last_states, autocast_kernel_dtype):
        T_pad, K_pad, V_pad = q.shape[2], q.shape[3], v.shape[3]
        assert T_pad in (16, 32, 64) or T_pad % 128 == 0
        assert all(d >= 16 and d & (d - 1) == 0 for d in (K_pad, V_pad))
        assert all(x.is_contiguous() and x.dtype == torch.float32 for x in (q, k, v, i, f))
        seen.append((T_pad, K_pad, V_pad))
        return mlstm_parallel__native_stablef_autograd(q, k, v, i, f, eps=eps)

    monkeypatch.setattr(xl_chunk, "mlstm_chunkwise__xl_chunk", stand_in)
    inputs = core_inputs(T=T, K=K, V=V, dtype=torch.float64)
    upstream = upstream_for(T, V=V, dtype=torch.float64)
    wrapped = output_and_grads(lambda *x: mlstm_kernel(*(t.float() for t in x), eps=0.0).double(), inputs, upstream)
    assert len(seen) == 1 and seen[0][0] >= T
    reference = output_and_grads(ours_sigmoid(mlstm_parallel, eps=0.0), inputs, upstream)
    # The wrapper computes in float32 (as the kernel does): tensor-wise relative errors.
    for name, a, b in zip(("h", *GRAD_NAMES), (wrapped[0], *wrapped[1]), (reference[0], *reference[1])):
        assert relative_error(a, b) < 1e-4, name  # float32 rounding; a wrong pad or scale gives O(1)


# ---- GPU: the mlstm-kernels kernel against the reference -------------------------------------------

# The kernel's tl.dot may run float32 in TF32 (10-bit mantissa): compare relative errors per tensor.
GPU_REL_TOL = 1e-2


@pytest.mark.requires_kernel(KERNEL_MODULE)
@pytest.mark.parametrize("form", ["parallel", "chunkwise"])
@pytest.mark.parametrize("T, K, V", [(64, 16, 16), (37, 8, 6), (300, 32, 64)])
def test_kernel_core_matches_reference_core(T, K, V, form, output_and_grads, relative_error):
    """The core op with gradients, against both CPU forms (chunkwise in chunks of 64); lengths and
    head sizes the kernel pads (37, 300; 8, 6) or not. eps = 0: the kernel starts its stabiliser at
    m = 0, we at the row maximum, which changes only how much eps weighs, and these gates (up to
    e^±9) would make that visible."""
    inputs = [x.detach().cuda().requires_grad_() for x in core_inputs(T=T, H=4, K=K, V=V)]
    upstream = upstream_for(T, H=4, V=V).cuda()
    reference = mlstm_parallel if form == "parallel" else mlstm_chunkwise
    h_k, grads_k = output_and_grads(lambda *x: mlstm_kernel(*x, eps=0.0), inputs, upstream)
    h_r, grads_r = output_and_grads(ours_sigmoid(reference, eps=0.0), inputs, upstream)
    assert relative_error(h_k, h_r) < GPU_REL_TOL
    for name, a, b in zip(GRAD_NAMES, grads_k, grads_r):
        assert relative_error(a, b) < GPU_REL_TOL, name
