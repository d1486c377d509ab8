"""mLSTM: the block's contract and suite features, and (on a GPU) the block on mlstm-kernels' kernel
against the block on the reference (the cell itself is tested in tests/test_ops_mlstm.py)."""

import pytest
import torch

import emergence_bench.mixers.mlstm
from emergence_bench.engine.batching_probe import seed_parallel_supported
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import plan
from emergence_bench.mixers.backend import ENV
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.init import WeightInit
from emergence_bench.mixers.mlstm import KERNEL_MODULE, MLSTM
from emergence_bench.mixers.ops.mlstm import mlstm_recurrent
from emergence_bench.perf.loops import step_seconds
from emergence_bench.perf.mixers import builtin_mixers

# ---- the mixer -------------------------------------------------------------------------------------

def make(d_model=16, max_len=24, **hparams):
    torch.manual_seed(0)
    hparams = {**MLSTM.small, **hparams}
    return MLSTM(d_model=d_model, max_len=max_len, layer_idx=0, **hparams)


def test_shapes_parameters_and_contract():
    mixer = make(n_heads=4, proj_factor=1.5, qkv_blocksize=2, conv_size=3)  # E = 24, heads of 6
    assert (mixer.inner_dim, mixer.head_dim) == (24, 6)
    assert mixer(torch.randn(2, 24, 16), MixerContext()).shape == (2, 24, 16)
    assert mixer(torch.randn(2, 5, 16), MixerContext()).shape == (2, 5, 16)
    assert mixer.up_proj.weight.shape == (48, 16) and mixer.down_proj.weight.shape == (16, 24)
    assert mixer.q_weight.shape == mixer.k_weight.shape == mixer.v_weight.shape == (12, 2, 2)
    assert mixer.igate.weight.shape == mixer.fgate.weight.shape == (4, 72)
    assert mixer.conv1d.weight.shape == (24, 1, 3)
    assert mixer.out_norm_weight.shape == mixer.skip.shape == (24,)
    assert not MLSTM.exposes_attention and MLSTM.backends == ("reference", "kernel")


def test_defaults_are_the_paper_block_and_its_gate_init():
    mixer = MLSTM(d_model=64, max_len=8, layer_idx=0)
    assert (mixer.n_heads, mixer.inner_dim, mixer.head_dim, mixer.conv_size, mixer.qkv_blocksize) == (4, 128, 32, 4, 4)
    assert mixer.forget_gate == "sigmoid"
    assert mixer.igate.weight.abs().max() == 0 and mixer.fgate.weight.abs().max() == 0
    torch.testing.assert_close(mixer.fgate.bias.detach(), torch.tensor([3.0, 4.0, 5.0, 6.0]))
    assert mixer.igate.bias.abs().max() < 0.5
    exp_gate = MLSTM(d_model=64, max_len=8, layer_idx=0, forget_gate="exp")  # the same initial forget values
    torch.testing.assert_close(exp_gate.fgate.bias.exp(), torch.sigmoid(mixer.fgate.bias))


@pytest.mark.parametrize("d_model, count", [(64, 30088), (128, 109320)])
def test_parameter_counts_at_the_preset_widths(d_model, count):
    mixer = MLSTM(d_model=d_model, max_len=8, layer_idx=0)
    assert sum(p.numel() for p in mixer.parameters()) == count


def test_model_init_reaches_the_projections_and_not_the_gates():
    model = SequenceModel(2, 16, {"name": "mlstm"}, d_model=64, init=WeightInit("normal", std=0.02))
    mixer = model.mixers[0]
    for weight in (mixer.up_proj.weight, mixer.down_proj.weight, mixer.q_weight):
        assert abs(weight.std().item() - 0.02) < 0.004
    assert mixer.fgate.weight.abs().max() == 0 and mixer.fgate.bias[0] == 3.0


@pytest.mark.parametrize("L, t", [(24, 0), (24, 9), (24, 23), (7, 3), (1, 0)])
@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
def test_causal(L, t, forget_gate, assert_causal):
    mixer = make(forget_gate=forget_gate)
    assert_causal(lambda x: mixer(x, MixerContext()), torch.randn(2, L, 16), t)


@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
def test_gradients_reach_every_parameter(forget_gate):
    mixer = make(forget_gate=forget_gate)
    mixer(torch.randn(3, 24, 16), MixerContext()).square().sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
@pytest.mark.parametrize("L, up_to, core", [(30, {}, "mlstm_parallel"), (90, {}, "mlstm_chunkwise"),
                                            (30, {"quadratic_up_to": 16}, "mlstm_chunkwise")])
def test_mixer_with_its_core_matches_mixer_with_step_by_step_core(monkeypatch, forget_gate, L, up_to, core):
    """The whole block in float64, with trained-looking (non-zero) gate weights: swapping the core it
    runs at this length (quadratic up to ``quadratic_up_to``, 64 by default, chunkwise above) for the
    loop changes nothing, so the block feeds the recurrence what it says."""
    mixer = make(forget_gate=forget_gate, max_len=L, **up_to).double()
    with torch.no_grad():
        for gate in (mixer.igate, mixer.fgate):
            gate.weight.normal_(0, 0.3)
    x = torch.randn(2, L, 16, dtype=torch.float64)
    ours = mixer(x, MixerContext())
    calls = []

    def step_by_step(*args, chunk_size=None):
        calls.append(chunk_size)
        return mlstm_recurrent(*args)

    monkeypatch.setattr(emergence_bench.mixers.mlstm, core, step_by_step)
    torch.testing.assert_close(ours, mixer(x, MixerContext()), atol=1e-12, rtol=1e-10)
    assert calls == [None if core == "mlstm_parallel" else emergence_bench.mixers.mlstm.CHUNK]  # this core ran


def test_backend_choice_on_cpu(monkeypatch):
    x = torch.randn(1, 6, 16)
    for forget_gate in ("sigmoid", "exp"):
        mixer = make(forget_gate=forget_gate)
        assert mixer.backend == "reference"  # before any forward
        monkeypatch.delenv(ENV, raising=False)
        mixer(x, MixerContext())
        assert mixer.backend == "reference"  # auto falls back to the reference on CPU
        monkeypatch.setenv(ENV, "kernel")
        with pytest.raises(RuntimeError, match="kernel"):
            mixer(x, MixerContext())
        monkeypatch.setenv(ENV, "reference")


@pytest.mark.parametrize("hparams, name", [
    ({"n_heads": 0}, "n_heads"), ({"n_heads": 3}, "proj_factor"), ({"proj_factor": 0}, "proj_factor"),
    ({"proj_factor": 1.03}, "proj_factor"), ({"qkv_blocksize": 5}, "qkv_blocksize"),
    ({"qkv_blocksize": 0}, "qkv_blocksize"), ({"conv_size": 0}, "conv_size"), ({"forget_gate": "tanh"}, "forget_gate"),
])
def test_invalid_hparams_name_the_parameter(hparams, name):
    with pytest.raises(ValueError, match=name):
        make(**hparams)


# ---- suite features -----------------------------------------------------------------------------

SMALL = {"name": "mlstm", **MLSTM.small}


@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
def test_seed_parallel_batches_it(forget_gate, tiny_config):
    supported, reason = seed_parallel_supported(plan(tiny_config(mixer={**SMALL, "forget_gate": forget_gate})))
    assert supported, reason


def test_the_ranking_cells_batch():
    """standard-cpu's mLSTM cellular-automata cell once fell back to one seed at a time: its input-gate
    bias gradient is float noise (1e-6 of the model's largest), which the trial judged at its own scale."""
    from emergence_bench.perf.mixers import ranking_sweep

    _, raw = ranking_sweep(["mlstm"], "cellular-automata").raw_runs()[0]
    supported, reason = seed_parallel_supported(plan(raw))
    assert supported, reason


def test_it_is_in_the_speed_table():
    assert "mlstm" in builtin_mixers()
    assert step_seconds({"name": "mlstm"}, length=16, batch=2, d_model=64, device="cpu", repeats=1) > 0


# ---- GPU: the mlstm-kernels kernel against the reference -------------------------------------------

# The kernel's tl.dot may run float32 in TF32 (10-bit mantissa): compare relative errors per tensor.
GPU_REL_TOL = 1e-2


@pytest.mark.requires_kernel(KERNEL_MODULE)
@pytest.mark.parametrize("d_model, n_heads, L", [(64, 4, 100), (128, 4, 256), (32, 2, 20)])
def test_kernel_matches_reference_forward_and_gradients(monkeypatch, d_model, n_heads, L,
                                                        assert_kernel_matches_reference):
    torch.manual_seed(0)
    mixer = MLSTM(d_model=d_model, max_len=L, layer_idx=0, n_heads=n_heads).cuda()
    with torch.no_grad():  # gates that depend on the input, as after training
        for gate in (mixer.igate, mixer.fgate):
            gate.weight.normal_(0, 0.05)
    x = torch.randn(3, L, d_model, device="cuda")
    upstream = torch.randn(3, L, d_model, device="cuda")

    assert_kernel_matches_reference(mixer, x, upstream, monkeypatch, GPU_REL_TOL)


@pytest.mark.requires_kernel(KERNEL_MODULE)
def test_exp_forget_gate_stays_on_the_reference_on_cuda(monkeypatch):
    mixer = MLSTM(d_model=32, max_len=16, layer_idx=0, forget_gate="exp").cuda()
    monkeypatch.delenv(ENV, raising=False)
    mixer(torch.randn(2, 16, 32, device="cuda"), MixerContext())
    assert mixer.backend == "reference"
    monkeypatch.setenv(ENV, "kernel")
    with pytest.raises(RuntimeError, match="exp forget gate"):
        mixer(torch.randn(2, 16, 32, device="cuda"), MixerContext())
