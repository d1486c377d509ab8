"""Gated DeltaNet: the chunked reference against fla's naive functions and our step-by-step loop,
the mixer's contract, and (on a GPU) the fla kernel against the reference."""

import math
import warnings

import pytest
import torch

import emergence_bench.mixers.gated_deltanet  # noqa: F401  (registers "gated_deltanet" before the lead imports it)
from emergence_bench.run import run
from conftest import (assert_causal, assert_kernel_matches_reference, assert_outputs_and_grads_close,
                      output_and_grads, relative_error, tiny_config)
from emergence_bench.mixers.backend import ENV, importable
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.gated_deltanet import (
    KERNEL_MODULE,
    GatedDeltaNet,
    gated_delta_rule_chunked,
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


def assert_close_all(ours, theirs, atol, rtol):
    assert_outputs_and_grads_close(ours, theirs, GRAD_NAMES, atol, rtol)


# float32 tolerances against fla's naive functions (which compute in float32 themselves): outputs
# and gradients are O(1), and the two orders of summation differ by a few ulps per step.
F32_ATOL, F32_RTOL = 2e-5, 1e-4


@pytest.mark.parametrize("T, chunk_size", [(37, 16), (20, 64), (64, 32)])
@pytest.mark.parametrize("oracle", ["recurrent", "chunk"])
def test_chunked_reference_matches_fla_naive_forward_and_gradients(T, chunk_size, oracle):
    """Several chunks with a padded tail, one chunk longer than T, and an exact multiple."""
    inputs = core_inputs(T=T)
    upstream = torch.randn(2, T, 3, 6, generator=torch.Generator().manual_seed(1))

    def naive(q, k, v, g, beta):
        if oracle == "recurrent":  # note fla's argument order: beta before g
            return naive_recurrent_gated_delta_rule(q, k, v, beta, g)[0]
        return naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=16)[0]

    ours = output_and_grads(lambda *x: gated_delta_rule_chunked(*x, chunk_size=chunk_size), inputs, upstream)
    assert_close_all(ours, output_and_grads(naive, inputs, upstream), atol=F32_ATOL, rtol=F32_RTOL)


def test_step_by_step_form_matches_fla_naive_recurrent():
    inputs = core_inputs(T=11)
    upstream = torch.randn(2, 11, 3, 6, generator=torch.Generator().manual_seed(1))
    ours = output_and_grads(gated_delta_rule_recurrent, inputs, upstream)
    theirs = output_and_grads(lambda q, k, v, g, b: naive_recurrent_gated_delta_rule(q, k, v, b, g)[0],
                              inputs, upstream)
    assert_close_all(ours, theirs, atol=F32_ATOL, rtol=F32_RTOL)


@pytest.mark.parametrize("T, chunk_size", [(1, 32), (23, 4), (23, 8), (40, 64)])
@pytest.mark.parametrize("strong_decay", [False, True])
def test_chunked_matches_step_by_step_in_float64(T, chunk_size, strong_decay):
    """Tight agreement in float64, also with decays down to exp(-30) per step (in-chunk cumulative
    log-decays far below float range if they were exponentiated on their own)."""
    inputs = core_inputs(T=T, dtype=torch.float64, strong_decay=strong_decay)
    upstream = torch.randn(2, T, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ours = output_and_grads(lambda *x: gated_delta_rule_chunked(*x, chunk_size=chunk_size), inputs, upstream)
    theirs = output_and_grads(gated_delta_rule_recurrent, inputs, upstream)
    assert_close_all(ours, theirs, atol=1e-10, rtol=1e-10)


def test_chunked_is_finite_and_accurate_in_float32_under_strong_decay():
    inputs = core_inputs(T=70, strong_decay=True)
    with torch.no_grad():
        inputs[3][:, 10:40] = -80.0  # exp(-80 · 30) underflows to 0 in any dtype
    upstream = torch.randn(2, 70, 3, 6, generator=torch.Generator().manual_seed(1))
    ours = output_and_grads(lambda *x: gated_delta_rule_chunked(*x, chunk_size=64), inputs, upstream)
    assert torch.isfinite(ours[0]).all() and all(torch.isfinite(g).all() for g in ours[1])
    theirs = output_and_grads(gated_delta_rule_recurrent, inputs, upstream)
    assert_close_all(ours, theirs, atol=F32_ATOL, rtol=F32_RTOL)


def test_chunked_keeps_input_dtype_and_scale_argument():
    q, k, v, g, beta = (x.detach() for x in core_inputs(T=9))
    o = gated_delta_rule_chunked(q, k, v, g, beta, scale=0.25)
    assert o.dtype == torch.float32 and o.shape == (2, 9, 3, 6)
    recurrent = gated_delta_rule_recurrent(q, k, v, g, beta, scale=0.25)
    torch.testing.assert_close(o, recurrent, atol=1e-5, rtol=1e-4)
    # The output is linear in q and scale is applied once, so the default K^-0.5 rescales it.
    default = gated_delta_rule_chunked(q, k, v, g, beta)
    torch.testing.assert_close(default, o * 4 / math.sqrt(8), atol=1e-5, rtol=1e-4)


# ---- the mixer -------------------------------------------------------------------------------------

def make(d_model=16, max_len=24, **hparams):
    torch.manual_seed(0)
    hparams = {"n_heads": 2, "head_dim": 4, **hparams}
    return GatedDeltaNet(d_model=d_model, max_len=max_len, layer_idx=0, **hparams)


def test_shapes_parameters_and_contract():
    mixer = make(n_heads=3, head_dim=4, expand_v=1.5)
    assert mixer(torch.randn(2, 24, 16), MixerContext()).shape == (2, 24, 16)
    assert mixer(torch.randn(2, 5, 16), MixerContext()).shape == (2, 5, 16)
    assert (mixer.q_proj.out_features, mixer.v_proj.out_features, mixer.g_proj.out_features) == (12, 18, 18)
    assert mixer.A_log.shape == mixer.dt_bias.shape == (3,) and mixer.o_norm_weight.shape == (6,)
    assert mixer.q_conv1d.weight.shape == (12, 1, 4)
    assert not GatedDeltaNet.exposes_attention
    assert GatedDeltaNet.backends == ("reference", "kernel")


def test_defaults_match_the_brief():
    mixer = GatedDeltaNet(d_model=32, max_len=8, layer_idx=0)
    assert (mixer.n_heads, mixer.head_dim, mixer.head_v_dim, mixer.conv_size) == (4, 16, 32, 4)


def test_decay_init_follows_fla():
    """A = exp(A_log) in (0, 16); dt = softplus(dt_bias) in [1e-3, 0.1]; so every head starts with a
    decay per step exp(-A·dt) strictly between 0 and 1."""
    mixer = make(n_heads=64)
    A, dt = mixer.A_log.exp(), torch.nn.functional.softplus(mixer.dt_bias)
    assert (A > 0).all() and (A < 16).all()
    assert (dt >= 1e-3 * (1 - 1e-5)).all() and (dt <= 0.1 * (1 + 1e-5)).all()
    assert dt.max() / dt.min() > 10  # log-uniform: spread over the range, not one value
    assert mixer.A_log._no_weight_decay and mixer.dt_bias._no_weight_decay


@pytest.mark.parametrize("L, t", [(24, 0), (24, 9), (24, 23), (7, 3), (1, 0)])
def test_causal(L, t):
    """Perturbing position t leaves every output before t unchanged and changes some at/after t."""
    mixer = make()
    assert_causal(lambda x: mixer(x, MixerContext()), torch.randn(2, L, 16), t)


def test_gradients_reach_every_parameter():
    mixer = make()
    mixer(torch.randn(3, 24, 16), MixerContext()).square().sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_mixer_with_chunked_core_matches_mixer_with_step_by_step_core(monkeypatch):
    """The whole layer in float64 over 40 positions (two chunks of 32): swapping the core op for
    the loop changes nothing, so the chunked path is wired as the recurrence says."""
    mixer = make().double()
    x = torch.randn(2, 40, 16, dtype=torch.float64)
    chunked = mixer(x, MixerContext())
    monkeypatch.setattr(emergence_bench.mixers.gated_deltanet, "gated_delta_rule_chunked", gated_delta_rule_recurrent)
    torch.testing.assert_close(chunked, mixer(x, MixerContext()), atol=1e-12, rtol=1e-10)


def test_backend_choice_on_cpu(monkeypatch):
    mixer = make()
    x = torch.randn(1, 6, 16)
    assert mixer.backend == "reference"  # before any forward
    monkeypatch.delenv(ENV, raising=False)
    mixer(x, MixerContext())
    assert mixer.backend == "reference"  # auto falls back to the reference on CPU
    monkeypatch.setenv(ENV, "reference")
    mixer(x, MixerContext())
    assert mixer.backend == "reference"
    monkeypatch.setenv(ENV, "kernel")
    with pytest.raises(RuntimeError, match="kernel"):
        mixer(x, MixerContext())


@pytest.mark.parametrize("hparams, name", [
    ({"n_heads": 0}, "n_heads"), ({"head_dim": 0}, "head_dim"), ({"expand_v": 0}, "expand_v"),
    ({"head_dim": 3, "expand_v": 0.5}, "expand_v"), ({"conv_size": 0}, "conv_size"),
])
def test_invalid_hparams_name_the_parameter(hparams, name):
    with pytest.raises(ValueError, match=name):
        make(**hparams)


def test_trains_end_to_end(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    mixer = {"name": "gated_deltanet", "n_heads": 2, "head_dim": 4, "expand_v": 2, "conv_size": 3}
    record = run(tiny_config(mixer=mixer), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["config"]["mixer"] == mixer
    assert record["backend"] == "reference"


# ---- GPU: the fla kernel against the reference -------------------------------------------------------

# The kernel's tl.dot runs float32 inputs in TF32 on recent GPUs (10-bit mantissa), so we compare
# relative errors ‖a - b‖ / ‖b‖ per tensor rather than elementwise float32 tolerances.
GPU_REL_TOL = 5e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not importable(KERNEL_MODULE),
                    reason="needs CUDA and flash-linear-attention's Triton kernels")
@pytest.mark.parametrize("head_dim, expand_v, L", [(16, 2, 100), (32, 1, 256), (8, 2, 70)])
def test_kernel_matches_reference_forward_and_gradients(monkeypatch, head_dim, expand_v, L):
    torch.manual_seed(0)
    mixer = GatedDeltaNet(d_model=64, max_len=L, layer_idx=0, n_heads=4, head_dim=head_dim,
                          expand_v=expand_v).cuda()
    x = torch.randn(3, L, 64, device="cuda")
    upstream = torch.randn(3, L, 64, device="cuda")

    assert_kernel_matches_reference(mixer, x, upstream, monkeypatch, GPU_REL_TOL)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not importable(KERNEL_MODULE),
                    reason="needs CUDA and flash-linear-attention's Triton kernels")
def test_kernel_core_matches_reference_core():
    """The core op alone, with gradients w.r.t. q, k, v, g and beta."""
    from emergence_bench.mixers.gated_deltanet import gated_delta_rule_kernel

    inputs = [x.detach().cuda().requires_grad_() for x in core_inputs(B=2, T=150, H=4, K=16, V=32)]
    upstream = torch.randn(2, 150, 4, 32, device="cuda")
    (o_k, grads_k) = output_and_grads(gated_delta_rule_kernel, inputs, upstream)
    (o_r, grads_r) = output_and_grads(gated_delta_rule_chunked, inputs, upstream)
    assert relative_error(o_k, o_r) < GPU_REL_TOL
    for name, a, b in zip(GRAD_NAMES, grads_k, grads_r):
        assert relative_error(a, b) < GPU_REL_TOL, name
