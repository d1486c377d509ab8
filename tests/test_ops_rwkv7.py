"""RWKV-7's core op (the generalised delta rule): the chunked form against fla's naive DPLR recurrence
and our step-by-step loop, and (on a GPU) fla's kernel against the chunked form."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from emergence_bench.mixers.ops.rwkv7 import KERNEL_MODULE, rwkv7_chunked, rwkv7_recurrent


def fla_naive_dplr():
    """fla's naive DPLR recurrence, loaded from its file alone: importing the ``fla`` package would
    pull in every Triton kernel (slow, and useless on a CPU)."""
    spec = importlib.util.find_spec("fla")
    path = Path(spec.submodule_search_locations[0]) / "ops/generalized_delta_rule/dplr/naive.py"
    spec = importlib.util.spec_from_file_location("fla_dplr_naive", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dplr_recurrence


def core_inputs(B=2, T=21, H=3, N=8, dtype=torch.float32, decay_scale=1.0, seed=0):
    """Random RWKV-7-shaped core inputs [B, T, H, N]: a = -kk, b = kk * iclr with unit kk."""
    g = torch.Generator().manual_seed(seed)
    r, k, v = (torch.randn(B, T, H, N, generator=g, dtype=dtype) for _ in range(3))
    logit = 2 * torch.randn(B, T, H, N, generator=g, dtype=dtype)
    log_w = -decay_scale * math.exp(-0.5) * torch.sigmoid(logit)
    kk = F.normalize(torch.randn(B, T, H, N, generator=g, dtype=dtype), dim=-1)
    iclr = torch.rand(B, T, H, N, generator=g, dtype=dtype)
    return r, log_w, k, v, -kk, kk * iclr


def grads(fn, inputs, seed=1):
    """Output and input gradients of a random projection of fn(*inputs)."""
    inputs = [t.detach().requires_grad_() for t in inputs]
    out = fn(*inputs)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype).to(out.device)
    return out.detach(), torch.autograd.grad((out * weight).sum(), inputs)


def test_core_matches_fla_naive_dplr_recurrence_forward_and_gradients():
    """fla's dplr_recurrence: [B, H, T, D] layout, S [K, V] = S diag(exp(gk)) + beta (alpha^T S) + k v^T,
    with q scaled by K^-0.5 (undone here, RWKV-7 uses scale 1). Tolerances: float32, 1e-5 relative."""
    dplr_recurrence = fla_naive_dplr()
    inputs = core_inputs()
    N = inputs[0].shape[-1]

    def oracle(r, log_w, k, v, a, b):
        heads_first = [t.transpose(1, 2) for t in (r * N ** 0.5, k, v, a, b, log_w)]
        out, _ = dplr_recurrence(*heads_first[:5], gk=heads_first[5])
        return out.transpose(1, 2)

    expected, expected_grads = grads(oracle, inputs)
    got, got_grads = grads(lambda *t: rwkv7_chunked(*t, chunk_size=8), inputs)
    scale = expected.abs().max()
    assert torch.allclose(got, expected, atol=1e-5 * scale, rtol=0)
    for name, g, e in zip(["r", "log_w", "k", "v", "a", "b"], got_grads, expected_grads):
        assert torch.allclose(g, e, atol=1e-5 * e.abs().max(), rtol=0), name


def test_recurrent_final_state_matches_fla_orientation():
    """Our state is [V, K] (the official orientation); fla's naive one is its transpose."""
    dplr_recurrence = fla_naive_dplr()
    r, log_w, k, v, a, b = core_inputs(T=9)
    _, state = rwkv7_recurrent(r, log_w, k, v, a, b)
    _, fla_state = dplr_recurrence(*[t.transpose(1, 2) for t in (r, k, v, a, b)], gk=log_w.transpose(1, 2))
    assert torch.allclose(state, fla_state.transpose(-1, -2), atol=1e-5)


@pytest.mark.parametrize("T, chunk_size", [(1, 16), (5, 16), (16, 16), (33, 16), (40, 8), (37, 64)])
@pytest.mark.parametrize("decay_scale", [1.0, 6.0])
def test_chunked_matches_step_by_step_in_float64(T, chunk_size, decay_scale):
    """Forward and gradients, including lengths that are not multiples of the chunk and decays 6×
    stronger than RWKV-7's bound (at the smaller chunks). Tolerance: 1e-9 relative (float64)."""
    if decay_scale > 1 and chunk_size > 16:
        pytest.skip("exp(-G) over 64 strong-decay steps is outside the chunked form's stated range")
    inputs = core_inputs(T=T, dtype=torch.float64, decay_scale=decay_scale)
    expected, expected_grads = grads(lambda *t: rwkv7_recurrent(*t)[0], inputs)
    got, got_grads = grads(lambda *t: rwkv7_chunked(*t, chunk_size=chunk_size), inputs)
    assert got.dtype == torch.float64
    assert torch.allclose(got, expected, atol=1e-9 * expected.abs().max(), rtol=0)
    for g, e in zip(got_grads, expected_grads):  # + 1: at T = 1 the a and b gradients are exactly 0
        assert torch.allclose(g, e, atol=1e-9 * (e.abs().max() + 1), rtol=0)


def test_chunked_is_accurate_in_float32_at_the_benchmark_length():
    """L = 256 at the default chunk: float32 chunked vs float64 step-by-step, 1e-4 relative."""
    inputs = core_inputs(B=1, T=256, H=2, N=16, dtype=torch.float64)
    expected, _ = rwkv7_recurrent(*inputs)
    got = rwkv7_chunked(*[t.float() for t in inputs])
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), expected, atol=1e-4 * expected.abs().max(), rtol=0)


# ---- GPU: kernel vs reference -----------------------------------------------------------------


def close(got, expected, what):
    """Triton's float32 dots may use TF32: 1e-2 relative in norm per tensor."""
    error = (got - expected).norm() / expected.norm().clamp_min(1e-12)
    assert error < 1e-2, f"{what}: relative error {error:.2e}"


@pytest.mark.requires_kernel(KERNEL_MODULE)
def test_kernel_matches_reference_on_gpu():
    """fla's chunk_rwkv7 vs our chunked reference, both float32 on CUDA: the core op's output and
    input gradients."""
    from fla.ops.rwkv7 import chunk_rwkv7

    inputs = [t.cuda() for t in core_inputs(B=2, T=100, H=4, N=16)]
    expected, expected_grads = grads(rwkv7_chunked, inputs)
    got, got_grads = grads(lambda *t: chunk_rwkv7(*t, scale=1.0, lower_bound=-0.607)[0], inputs)
    close(got, expected, "core out")
    for name, g, e in zip(["r", "log_w", "k", "v", "a", "b"], got_grads, expected_grads):
        close(g, e, f"core d{name}")
