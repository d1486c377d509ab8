"""Gated DeltaNet: the mixer's wiring and contract, and (on a GPU) the layer on fla's kernel against
the layer on the reference (the core op itself is tested in tests/test_ops_gated_delta_rule.py)."""

import pytest
import torch

import emergence_bench.mixers.gated_deltanet
from emergence_bench.engine.run import run
from emergence_bench.mixers.backend import ENV
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.gated_deltanet import KERNEL_MODULE, GatedDeltaNet
from emergence_bench.mixers.ops.gated_delta_rule import gated_delta_rule_recurrent

# ---- the mixer -------------------------------------------------------------------------------------

def make(d_model=16, max_len=24, **hparams):
    torch.manual_seed(0)
    hparams = {**GatedDeltaNet.small, **hparams}
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
def test_causal(L, t, assert_causal):
    """Perturbing position t leaves every output before t unchanged and changes some at/after t."""
    mixer = make()
    assert_causal(lambda x: mixer(x, MixerContext()), torch.randn(2, L, 16), t)


def test_gradients_reach_every_parameter():
    mixer = make()
    mixer(torch.randn(3, 24, 16), MixerContext()).square().sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("L, chunk, expected", [(40, {}, 16), (40, {"chunk_size": 32}, 32), (24, {}, 24)])
def test_mixer_with_chunked_core_matches_mixer_with_step_by_step_core(monkeypatch, L, chunk, expected):
    """The whole layer in float64 (chunks of 16 by default, of 32 as ladder v2; one chunk up to 32
    positions): swapping the core op for the loop changes nothing, so the chunked path is wired as
    the recurrence says, in the chunks asked."""
    mixer = make(max_len=L, **chunk).double()
    x = torch.randn(2, L, 16, dtype=torch.float64)
    chunked = mixer(x, MixerContext())
    calls = []

    def step_by_step(*args, chunk_size, **kwargs):
        calls.append(chunk_size)
        return gated_delta_rule_recurrent(*args, **kwargs)

    monkeypatch.setattr(emergence_bench.mixers.gated_deltanet, "gated_delta_rule_chunked", step_by_step)
    torch.testing.assert_close(chunked, mixer(x, MixerContext()), atol=1e-12, rtol=1e-10)
    assert calls == [expected]


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
    ({"head_dim": 3, "expand_v": 0.5}, "expand_v"), ({"conv_size": 0}, "conv_size"), ({"chunk_size": 0}, "chunk_size"),
])
def test_invalid_hparams_name_the_parameter(hparams, name):
    with pytest.raises(ValueError, match=name):
        make(**hparams)


def test_trains_end_to_end(tmp_path, monkeypatch, tiny_config):
    monkeypatch.delenv(ENV, raising=False)
    mixer = {"name": "gated_deltanet", "n_heads": 2, "head_dim": 4, "expand_v": 2, "conv_size": 3, "chunk_size": 16}
    record = run(tiny_config(mixer=mixer), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["config"]["mixer"] == mixer
    assert record["backend"] == "reference"


# ---- GPU: the fla kernel against the reference -------------------------------------------------------

# The kernel's tl.dot runs float32 inputs in TF32 on recent GPUs (10-bit mantissa), so we compare
# relative errors ‖a - b‖ / ‖b‖ per tensor rather than elementwise float32 tolerances.
GPU_REL_TOL = 5e-3


@pytest.mark.requires_kernel(KERNEL_MODULE)
@pytest.mark.parametrize("head_dim, expand_v, L", [(16, 2, 100), (32, 1, 256), (8, 2, 70)])
def test_kernel_matches_reference_forward_and_gradients(monkeypatch, head_dim, expand_v, L,
                                                        assert_kernel_matches_reference):
    torch.manual_seed(0)
    mixer = GatedDeltaNet(d_model=64, max_len=L, layer_idx=0, n_heads=4, head_dim=head_dim,
                          expand_v=expand_v).cuda()
    x = torch.randn(3, L, 64, device="cuda")
    upstream = torch.randn(3, L, 64, device="cuda")

    assert_kernel_matches_reference(mixer, x, upstream, monkeypatch, GPU_REL_TOL)
