"""LRU: the block against an independent complex-number implementation, the paper's init and
γ-normalisation, the mixer contract and suite features (the scan itself is tested in
tests/test_ops_lru_scan.py)."""

import math

import pytest
import torch
import torch.nn.functional as F

from emergence_bench.engine.batching_probe import seed_parallel_supported
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import plan
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.init import WeightInit
from emergence_bench.mixers.lru import LRU
from emergence_bench.mixers.ops.lru_scan import lru_scan
from emergence_bench.perf.loops import step_seconds
from emergence_bench.perf.mixers import builtin_mixers

# ---- the mixer -------------------------------------------------------------------------------------

def make(d_model=16, max_len=24, **hparams):
    torch.manual_seed(0)
    return LRU(d_model=d_model, max_len=max_len, layer_idx=0, **{**LRU.small, **hparams})


def complex_block(mixer: LRU, x: torch.Tensor) -> torch.Tensor:
    """The LRU block written independently, in complex128 and from the paper's equations:
    h_t = λ h_{t-1} + (γ ⊙ B) x_t, y_t = Re(C h_t) + D ⊙ x_t, then GELU and the GLU."""
    p = {name: t.detach().double() for name, t in mixer.named_parameters()}
    lam = torch.exp(-torch.exp(p["nu_log"]) + 1j * torch.exp(p["theta_log"]))  # [N]
    B = (p["B_re"] + 1j * p["B_im"]) * torch.exp(p["gamma_log"])[:, None]  # [N, H]
    C = p["C_re"] + 1j * p["C_im"]  # [H, N]
    h = torch.zeros(x.shape[0], mixer.d_state, dtype=torch.complex128)
    outputs = []
    for t in range(x.shape[1]):
        h = lam * h + x[:, t].to(torch.complex128) @ B.T
        outputs.append((h @ C.T).real + p["D"] * x[:, t])
    y = F.gelu(torch.stack(outputs, dim=1))
    a, g = (y @ p["glu.weight"].T + p["glu.bias"]).chunk(2, dim=-1)
    return a * torch.sigmoid(g)


def test_block_matches_an_independent_complex_implementation():
    mixer = make().double()
    x = torch.randn(3, 24, 16, dtype=torch.float64)
    torch.testing.assert_close(mixer(x, MixerContext()), complex_block(mixer, x), atol=1e-12, rtol=1e-10)


def test_shapes_parameters_and_contract():
    mixer = make(d_state=6)
    assert mixer(torch.randn(2, 24, 16), MixerContext()).shape == (2, 24, 16)
    assert mixer(torch.randn(2, 5, 16), MixerContext()).shape == (2, 5, 16)
    assert mixer.B_re.shape == mixer.B_im.shape == (6, 16) and mixer.C_re.shape == mixer.C_im.shape == (16, 6)
    assert mixer.nu_log.shape == mixer.theta_log.shape == mixer.gamma_log.shape == (6,)
    assert mixer.D.shape == (16,) and mixer.glu.weight.shape == (32, 16)
    assert not LRU.exposes_attention and LRU.backends == ("torch",) and mixer.backend == "torch"


@pytest.mark.parametrize("d_model, count", [(64, 24960), (128, 66112)])
def test_parameter_counts_at_the_preset_widths(d_model, count):
    mixer = LRU(d_model=d_model, max_len=8, layer_idx=0)
    assert mixer.d_state == 64
    assert sum(p.numel() for p in mixer.parameters()) == count


@pytest.mark.parametrize("r_min, r_max, max_phase", [(0.0, 1.0, 2 * math.pi), (0.9, 0.999, math.pi / 10)])
def test_init_is_the_papers(r_min, r_max, max_phase):
    torch.manual_seed(0)
    mixer = LRU(d_model=32, max_len=8, layer_idx=0, d_state=4096, r_min=r_min, r_max=r_max, max_phase=max_phase)
    modulus = torch.exp(-mixer.nu_log.exp()).detach()
    phase = mixer.theta_log.exp().detach()
    assert modulus.min() >= r_min - 1e-6 and modulus.max() <= r_max + 1e-6
    assert phase.min() >= 0 and phase.max() <= max_phase * (1 + 1e-6)
    # |λ|² uniform on [r_min², r_max²] (uniform on the ring's area), the phase uniform.
    assert abs((modulus ** 2).mean().item() - (r_min ** 2 + r_max ** 2) / 2) < 0.02 * (r_max ** 2 - r_min ** 2) + 1e-3
    assert abs(phase.mean().item() - max_phase / 2) < 0.02 * max_phase
    gamma = mixer.gamma_log.exp().detach()
    torch.testing.assert_close(gamma ** 2 + modulus ** 2, torch.ones(4096), atol=1e-6, rtol=0)  # γ = sqrt(1 - |λ|²)
    assert abs(mixer.B_re.std().item() - 1 / math.sqrt(64)) < 0.01 and abs(mixer.C_im.std().item() - 1 / 64) < 0.002
    assert all(p._no_weight_decay for p in (mixer.nu_log, mixer.theta_log, mixer.gamma_log))


def test_gamma_normalisation_keeps_the_state_at_the_inputs_scale():
    """White-noise input: E|h_t|² / E|B x_t|² → γ² / (1 - |λ|²) = 1 in every channel once the
    transient has passed, where without γ it would be 1 / (1 - |λ|²) (up to 10 here)."""
    torch.manual_seed(0)
    mixer = LRU(d_model=16, max_len=8, layer_idx=0, d_state=8, r_min=0.5, r_max=0.95)
    x = torch.randn(256, 300, 16)
    with torch.no_grad():
        gamma = mixer.gamma_log.exp()
        b_re, b_im = x @ mixer.B_re.T, x @ mixer.B_im.T
        h_re, h_im = lru_scan(b_re * gamma, b_im * gamma, mixer.nu_log, mixer.theta_log)
    ratio = (h_re[:, 200:] ** 2 + h_im[:, 200:] ** 2).mean((0, 1)) / (b_re ** 2 + b_im ** 2).mean((0, 1))
    assert ((ratio - 1).abs() < 0.1).all(), ratio
    assert (1 / (1 - torch.exp(-mixer.nu_log.exp()) ** 2)).max() > 3  # so γ did the work


def test_model_init_reaches_the_projections_and_not_the_recurrence():
    torch.manual_seed(0)
    model = SequenceModel(2, 16, {"name": "lru"}, d_model=64, init=WeightInit("normal", std=0.02))
    mixer = model.mixers[0]
    for weight in (mixer.glu.weight, mixer.B_re, mixer.C_im):
        assert abs(weight.std().item() - 0.02) < 0.004
    assert mixer.D.std() > 0.5  # still the paper's N(0, 1)
    gamma, modulus = mixer.gamma_log.exp().detach(), torch.exp(-mixer.nu_log.exp()).detach()
    torch.testing.assert_close(gamma ** 2 + modulus ** 2, torch.ones(64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("hparams, name", [
    ({"d_state": 0}, "d_state"), ({"r_min": 0.5, "r_max": 0.5}, "r_min"), ({"r_max": 1.5}, "r_max"),
    ({"r_min": -0.1}, "r_min"), ({"max_phase": 0}, "max_phase"),
])
def test_invalid_hparams_name_the_parameter(hparams, name):
    with pytest.raises(ValueError, match=name):
        make(**hparams)


# ---- suite features -----------------------------------------------------------------------------

SMALL = {"name": "lru", **LRU.small}


def test_seed_parallel_batches_it(tiny_config):
    supported, reason = seed_parallel_supported(plan(tiny_config(mixer=SMALL)))
    assert supported, reason


def test_it_is_in_the_speed_table():
    assert "lru" in builtin_mixers()
    assert step_seconds({"name": "lru"}, length=16, batch=2, d_model=64, device="cpu", repeats=1) > 0
