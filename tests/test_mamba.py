"""Mamba: the chunked selective scan against a plain loop, the block's wiring, and the contract."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

import emergence_bench.mixers.mamba  # noqa: F401  (registers "mamba" before the lead adds it to mixers/__init__)
from emergence_bench.model import SequenceModel
from emergence_bench.run import run
from conftest import assert_causal, tiny_config
from emergence_bench.mixers import backend
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.mamba import KERNEL_MODULE, Mamba, linear_scan, selective_scan, selective_scan_recurrent

# float64: the chunked scan and the loop agree to rounding (~1e-15 seen). float32 against the
# float64 loop: ~1e-7 of the largest value seen, for outputs and every gradient; we allow 1e-5.
TOL64, TOL32 = 1e-10, 1e-5


def oracle_selective_scan(u, delta, A, B, C, D):
    """Written from the equations, one step at a time, independent of emergence_bench.mixers.mamba.

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


def assert_close_scaled(actual, expected, tol, what=""):
    """max |actual - expected| ≤ tol · max |expected| (a scale-free check for sums of many terms)."""
    err = (actual.double() - expected.double()).abs().max().item()
    scale = max(expected.double().abs().max().item(), 1e-30)
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol:g} × {scale:.3g}"


def outputs_and_grads(fn, inputs, weight):
    y = fn(*inputs)
    return y, torch.autograd.grad((y * weight).sum(), inputs)


NAMES = ["u", "delta", "A", "B", "C", "D"]


# ------------------------------------------------------------------------------ the linear scan


@pytest.mark.parametrize("L", [1, 2, 3, 5, 8, 9, 15, 16, 17, 26, 50])
@pytest.mark.parametrize("in_place", [False, True])
def test_linear_scan_and_its_transpose_match_loops(L, in_place):
    """Every chunk count and leftover: forward h_t = a_t h_{t-1} + b_t, transpose
    g_t = b_t + a_{t+1} g_{t+1}, also when written over b itself."""
    a = torch.rand(L, 3, 4, dtype=torch.float64)
    b = torch.randn(L, 3, 4, dtype=torch.float64)
    forward, transpose = torch.zeros_like(b), torch.zeros_like(b)
    for t in range(L):
        forward[t] = b[t] + (a[t] * forward[t - 1] if t > 0 else 0)
    for t in reversed(range(L)):
        transpose[t] = b[t] + (a[t + 1] * transpose[t + 1] if t < L - 1 else 0)
    for flag, expected in ((False, forward), (True, transpose)):
        out = b.clone() if in_place else None
        got = linear_scan(a, b.clone() if in_place else b, transpose=flag, out=out)
        assert torch.allclose(got, expected, atol=1e-12), f"transpose={flag}"


def test_linear_scan_transpose_is_the_adjoint():
    """<scan(a, x), y> = <x, scanᵀ(a, y)>: what makes the backward one transpose scan."""
    a = torch.rand(37, 2, 3, dtype=torch.float64)
    x, y = torch.randn(2, 37, 2, 3, dtype=torch.float64)
    lhs = (linear_scan(a, x) * y).sum()
    rhs = (x * linear_scan(a, y, transpose=True)).sum()
    assert torch.allclose(lhs, rhs, atol=1e-12)


def test_linear_scan_never_overflows_with_long_strong_decays():
    """Only decays ≤ 1 are multiplied, so L = 400 with decays down to e^-60 stays finite and exact."""
    L = 400
    a = torch.exp(-60 * torch.rand(L, 8))
    b = torch.randn(L, 8)
    expected = torch.zeros_like(b)
    for t in range(L):
        expected[t] = b[t] + (a[t] * expected[t - 1] if t else 0)
    got = linear_scan(a, b)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, expected, atol=1e-5)


# ------------------------------------------------------------------------------ the selective scan


@pytest.mark.parametrize("L", [1, 4, 13, 16, 37])
def test_selective_scan_matches_oracle_float64(L):
    """Forward and the gradients w.r.t. u, delta, A, B, C, D, to rounding."""
    inputs = scan_inputs(L=L)
    weight = torch.randn(2, L, 5, dtype=torch.float64)
    y, grads = outputs_and_grads(selective_scan, inputs, weight)
    y_ref, grads_ref = outputs_and_grads(oracle_selective_scan, inputs, weight)
    assert_close_scaled(y, y_ref, TOL64, "y")
    for name, grad, grad_ref in zip(NAMES, grads, grads_ref):
        assert_close_scaled(grad, grad_ref, TOL64, f"d{name}")


@pytest.mark.parametrize("L, delta_scale", [(40, 1.0), (120, 4.0), (30, 1e-3)])
def test_selective_scan_float32_matches_float64_oracle(L, delta_scale):
    """float32 reference vs the float64 loop on the same numbers, with fast, strong decays
    (delta·|A| up to ~50 per step) and with nearly no decay at all."""
    inputs64 = scan_inputs(L=L, delta_scale=delta_scale)
    inputs32 = [t.detach().float().requires_grad_() for t in inputs64]
    weight = torch.randn(2, L, 5, dtype=torch.float64)
    y, grads = outputs_and_grads(selective_scan, inputs32, weight.float())
    y_ref, grads_ref = outputs_and_grads(oracle_selective_scan, inputs64, weight)
    assert y.dtype == torch.float32 and torch.isfinite(y).all()
    assert_close_scaled(y, y_ref, TOL32, "y")
    for name, grad, grad_ref in zip(NAMES, grads, grads_ref):
        assert torch.isfinite(grad).all(), name
        assert_close_scaled(grad, grad_ref, TOL32, f"d{name}")


@pytest.mark.parametrize("L", [1, 10, 25])
def test_chunked_form_matches_module_step_by_step_form(L):
    inputs = scan_inputs(L=L, batch=3, d=4, n=6, seed=1)
    weight = torch.randn(3, L, 4, dtype=torch.float64)
    y, grads = outputs_and_grads(selective_scan, inputs, weight)
    y_rec, grads_rec = outputs_and_grads(selective_scan_recurrent, inputs, weight)
    assert_close_scaled(y, y_rec, TOL64, "y")
    for name, grad, grad_rec in zip(NAMES, grads, grads_rec):
        assert_close_scaled(grad, grad_rec, TOL64, f"d{name}")


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
def test_vmapped_selective_scan_equals_separate_calls(in_dims):
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


def test_selective_scan_under_func_grad_vmap_of_grad_and_nested_vmap():
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


# ------------------------------------------------------------------------------ the block


def make(d_model=8, seed=0, **hparams):
    torch.manual_seed(seed)
    return Mamba(d_model=d_model, max_len=16, layer_idx=0, **{"d_state": 4, **hparams})


def test_shapes_knobs_and_initialisation():
    mixer = make(d_model=20, d_state=5, d_conv=3, expand=2)
    assert mixer(torch.randn(2, 11, 20), MixerContext()).shape == (2, 11, 20)
    assert not Mamba.exposes_attention and Mamba.backends == ("reference", "kernel")
    assert mixer.d_inner == 40 and mixer.dt_rank == math.ceil(20 / 16) == 2
    assert mixer.in_proj.weight.shape == (80, 20) and mixer.x_proj.weight.shape == (2 + 2 * 5, 40)
    assert mixer.conv1d.weight.shape == (40, 1, 3) and mixer.conv1d.bias is not None
    assert make(d_model=20, dt_rank=7).dt_rank == 7
    # S4D-real A = -(1..N) for every channel, D = 1.
    assert torch.allclose(-torch.exp(mixer.A_log), -torch.arange(1.0, 6.0).expand(40, 5))
    assert torch.equal(mixer.D, torch.ones(40))


def test_step_sizes_start_log_uniform_in_range_even_inside_a_model():
    """softplus(dt bias) is the initial step size, in [1e-3, 1e-1]; SequenceModel re-initialises
    every nn.Linear (zero biases), which must not reach it."""
    torch.manual_seed(0)
    model = SequenceModel(3, 16, {"name": "mamba", "d_state": 4}, d_model=64, n_layers=1)
    dt = F.softplus(model.mixers[0].dt_proj_bias.detach())
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 1e-1 * (1 + 1e-5)
    log_dt = dt.log()  # log-uniform: roughly evenly spread in log space
    assert log_dt.min() < math.log(3e-3) and log_dt.max() > math.log(3e-2)
    rank = model.mixers[0].dt_rank
    assert model.mixers[0].dt_proj_weight.abs().max() <= rank**-0.5  # uniform(±rank^-1/2)


@pytest.mark.parametrize("bad", [{"d_state": 0}, {"d_conv": 0}, {"expand": 0}, {"dt_rank": 0},
                                 {"dt_rank": "wide"}])
def test_invalid_knobs_name_the_parameter(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        make(**bad)


def test_block_wiring_matches_the_equations():
    """The module's forward, rebuilt by hand from its parameters with the oracle scan (float64):
    in_proj split (x, z), causal depthwise conv with bias, SiLU, x_proj split (dt, B, C), low-rank
    delta = softplus(W dt + bias), A = -exp(A_log), gate SiLU(z), out_proj."""
    mixer = make(d_model=6, d_state=3, d_conv=3).double()
    with torch.no_grad():  # move D and A away from their structured initial values
        mixer.D.normal_()
        mixer.A_log.add_(0.3 * torch.randn_like(mixer.A_log))
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    E, R, N, K = mixer.d_inner, mixer.dt_rank, mixer.d_state, mixer.d_conv
    xz = x @ mixer.in_proj.weight.T
    u, z = xz[..., :E], xz[..., E:]
    w = mixer.conv1d.weight[:, 0, :]  # [E, K]; tap K-1 multiplies the current step
    conv = torch.stack([mixer.conv1d.bias + sum(w[:, K - 1 - j] * u[:, t - j] for j in range(K) if t - j >= 0)
                        for t in range(9)], dim=1)
    u = F.silu(conv)
    dbc = u @ mixer.x_proj.weight.T
    dt, B, C = dbc[..., :R], dbc[..., R:R + N], dbc[..., R + N:]
    delta = F.softplus(dt @ mixer.dt_proj_weight.T + mixer.dt_proj_bias)
    y = oracle_selective_scan(u, delta, -torch.exp(mixer.A_log), B, C, mixer.D) * F.silu(z)
    expected = y @ mixer.out_proj.weight.T
    assert torch.allclose(mixer(x, MixerContext()), expected, atol=1e-12)


@pytest.mark.parametrize("L, t", [(12, 0), (12, 5), (12, 11), (5, 2), (1, 0)])
def test_causal(L, t):
    """Perturbing position t leaves every output before t unchanged and changes some at/after t."""
    mixer = make()
    with torch.no_grad():
        mixer.conv1d.bias.normal_()  # nothing hides behind a zero
    assert_causal(lambda x: mixer(x, MixerContext()), torch.randn(2, L, 8), t)


def test_every_parameter_gets_a_nonzero_gradient():
    mixer = make()
    (mixer(torch.randn(2, 12, 8), MixerContext()) ** 2).sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_vmap_over_two_stacked_parameter_sets_equals_two_separate_calls():
    """Seed-parallel's form: functional_call of one template under vmap over two mixers' stacked
    parameters (and two batches), autograd outside the vmap. Output and every parameter's gradient
    equal each mixer's own forward and backward (float64, to rounding)."""
    mixers = [make(seed=seed).double() for seed in (0, 1)]
    for mixer in mixers:
        with torch.no_grad():  # distinct SSM parameters per set, not Mamba's structured init
            mixer.D.normal_()
            mixer.A_log.add_(0.3 * torch.randn_like(mixer.A_log))
    names = [name for name, _ in mixers[0].named_parameters()]
    stacked = {name: torch.stack([dict(m.named_parameters())[name].detach() for m in mixers]).requires_grad_()
               for name in names}
    x = torch.randn(2, 3, 10, 8, dtype=torch.float64)  # [sets, batch, L, d_model]
    weight = torch.randn_like(x)
    out = vmap(lambda params, xk: functional_call(mixers[0], params, (xk, MixerContext())))(stacked, x)
    (out * weight).sum().backward()
    assert mixers[0].backend == "reference"
    for k, mixer in enumerate(mixers):
        own = mixer(x[k], MixerContext())
        (own * weight[k]).sum().backward()
        assert_close_scaled(out[k], own, TOL64, f"output[{k}]")
        for name, p in mixer.named_parameters():
            assert_close_scaled(stacked[name].grad[k], p.grad, TOL64, f"d{name}[{k}]")


def test_state_dict_round_trip_and_no_weight_decay_flags():
    trained, fresh = make(seed=0), make(seed=1)
    fresh.load_state_dict(trained.state_dict())
    x = torch.randn(2, 7, 8)
    assert torch.equal(fresh(x, MixerContext()), trained(x, MixerContext()))
    for p in (trained.A_log, trained.D, trained.dt_proj_bias):  # Mamba keeps these out of weight decay
        assert getattr(p, "_no_weight_decay", False)


def test_backend_choice_on_cpu(monkeypatch):
    mixer = make()
    x = torch.randn(1, 6, 8)
    assert mixer.backend == "reference"  # before any forward
    monkeypatch.setenv(backend.ENV, "reference")
    mixer(x, MixerContext())
    assert mixer.backend == "reference"
    monkeypatch.setenv(backend.ENV, "kernel")
    with pytest.raises(RuntimeError, match="kernel"):
        mixer(x, MixerContext())
    monkeypatch.delenv(backend.ENV)
    mixer(x, MixerContext())  # auto on CPU
    assert mixer.backend == "reference"


def test_trains_end_to_end(tmp_path):
    record = run(tiny_config(mixer={"name": "mamba", "d_state": 4, "expand": 2}), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["config"]["mixer"]["name"] == "mamba"
    assert record["backend"] == "reference"


# ------------------------------------------------------------------------------ GPU


def _kernel_available() -> bool:
    return torch.cuda.is_available() and backend.importable(KERNEL_MODULE)


@pytest.mark.gpu
@pytest.mark.skipif(not _kernel_available(), reason="needs CUDA and mamba-ssm")
def test_kernel_core_op_matches_reference_on_gpu():
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
    for name, grad, grad_ref in zip(NAMES, grads, grads_ref):
        assert_close_scaled(grad, grad_ref, 1e-3, f"d{name}")


@pytest.mark.gpu
@pytest.mark.skipif(not _kernel_available(), reason="needs CUDA and mamba-ssm")
def test_kernel_block_matches_reference_on_gpu(monkeypatch):
    """The whole block on each backend, same parameters: output, input and parameter gradients."""
    mixer = make(d_model=32, d_state=16).cuda()
    x = torch.randn(2, 64, 32, device="cuda")
    results = {}
    for name in ("kernel", "reference"):
        monkeypatch.setenv(backend.ENV, name)
        xr = x.clone().requires_grad_()
        mixer.zero_grad()
        out = mixer(xr, MixerContext())
        assert mixer.backend == name
        out.pow(2).sum().backward()
        results[name] = (out.detach(), xr.grad, {k: p.grad.clone() for k, p in mixer.named_parameters()})
    (out_k, gx_k, gp_k), (out_r, gx_r, gp_r) = results["kernel"], results["reference"]
    assert_close_scaled(out_k, out_r, 1e-4, "out")
    assert_close_scaled(gx_k, gx_r, 1e-3, "dx")
    for k in gp_r:
        assert_close_scaled(gp_k[k], gp_r[k], 1e-3, f"d{k}")
