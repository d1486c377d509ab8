"""Mamba: the block's wiring, its initialisation and the contract (the scan itself is tested in
tests/test_ops_selective_scan.py and tests/test_ops_linear_scan.py)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import run
from emergence_bench.mixers import backend
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.mamba import KERNEL_MODULE, Mamba
from emergence_bench.mixers.ops.selective_scan import selective_scan_recurrent

TOL64 = 1e-10  # float64 against float64: agreement to rounding


# ------------------------------------------------------------------------------ the block


def make(d_model=8, seed=0, **hparams):
    torch.manual_seed(seed)
    return Mamba(d_model=d_model, max_len=16, layer_idx=0, **{**Mamba.small, **hparams})


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
    """The module's forward, rebuilt by hand from its parameters with the step-by-step scan (float64;
    tests/test_ops_selective_scan.py holds that to a loop written from the equations):
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
    y = selective_scan_recurrent(u, delta, -torch.exp(mixer.A_log), B, C, mixer.D) * F.silu(z)
    expected = y @ mixer.out_proj.weight.T
    assert torch.allclose(mixer(x, MixerContext()), expected, atol=1e-12)


@pytest.mark.parametrize("L, t", [(12, 0), (12, 5), (12, 11), (5, 2), (1, 0)])
def test_causal(L, t, assert_causal):
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


def test_vmap_over_two_stacked_parameter_sets_equals_two_separate_calls(assert_close_scaled):
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


def test_trains_end_to_end(tmp_path, tiny_config):
    record = run(tiny_config(mixer={"name": "mamba", **Mamba.small}), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["config"]["mixer"]["name"] == "mamba"
    assert record["backend"] == "reference"



# ------------------------------------------------------------------------------ GPU


@pytest.mark.requires_kernel(KERNEL_MODULE)
def test_kernel_block_matches_reference_on_gpu(monkeypatch, assert_close_scaled):
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

