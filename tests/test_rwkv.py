"""RWKV-7 time mixing: the whole time mix against the official ``rwkv`` package's RWKV_x070, and the
mixer contract (the core op is tested in tests/test_ops_rwkv7.py)."""

import importlib
import math

import pytest
import torch

from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import run
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.ops.rwkv7 import KERNEL_MODULE
from emergence_bench.mixers.rwkv import RWKV7TimeMix


def official_time_mix(monkeypatch):
    """rwkv.model.RWKV_x070_TMix_seq. The package picks its code paths when imported: RWKV-7 needs
    RWKV_V7_ON=1, and RWKV_CUDA_ON=0 selects the pure-torch loop over time. Importing it also flips
    global torch flags (TF32, cudnn benchmark, JIT autocast), restored here for the other tests."""
    monkeypatch.setenv("RWKV_V7_ON", "1")
    monkeypatch.setenv("RWKV_CUDA_ON", "0")
    flags = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
             torch.backends.cuda.matmul.allow_tf32)
    jit_autocast = torch._C._jit_set_autocast_mode(True)  # returns the previous mode
    torch._C._jit_set_autocast_mode(jit_autocast)
    try:
        import rwkv.model

        if not hasattr(rwkv.model, "RWKV_x070_TMix_seq"):  # imported earlier without RWKV-7
            importlib.reload(rwkv.model)
        return rwkv.model.RWKV_x070_TMix_seq
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
         torch.backends.cuda.matmul.allow_tf32) = flags
        torch._C._jit_set_autocast_mode(jit_autocast)


def make(layer_idx=0, d_model=32, seed=0, randomise=False, **hparams):
    torch.manual_seed(seed)
    mixer = RWKV7TimeMix(d_model=d_model, max_len=24, layer_idx=layer_idx, **{**RWKV7TimeMix.small, **hparams})
    if randomise:  # away from the structured init, so no term hides behind a constant
        with torch.no_grad():
            for p in mixer.parameters():
                p.copy_(torch.randn_like(p) * (0.3 if p.dim() == 2 else 0.5))
    return mixer


# ---- the whole time mix against the official package ------------------------------------------


def official_arguments(mixer: RWKV7TimeMix) -> list[torch.Tensor]:
    """Our parameters in the order of rwkv.model.RWKV_x070_TMix_seq's weight arguments (x_r ...
    ln_b). Its matrices are applied as x @ W, like ours; r_k is flattened; layer 0's v0, v1, v2 are
    empty (ignored), as the package itself passes them."""
    x_r, x_w, x_k, x_v, x_a, x_g = mixer.shift_mix
    empty = torch.empty(0)
    v0, v1, v2 = ((mixer.value_mix_base, mixer.value_mix_down, mixer.value_mix_up)
                  if mixer.has_value_residual else (empty, empty, empty))
    weights = [x_r, x_w, x_k, x_v, x_a, x_g,
               mixer.decay_base, mixer.decay_down, mixer.decay_up,
               mixer.iclr_base, mixer.iclr_down, mixer.iclr_up, v0, v1, v2,
               mixer.gate_down, mixer.gate_up,
               mixer.removal_key_scale, mixer.iclr_key_mix, mixer.bonus.flatten(),
               mixer.receptance, mixer.key, mixer.value, mixer.output,
               mixer.out_norm.weight, mixer.out_norm.bias]
    return [w.detach().contiguous() for w in weights]


@pytest.mark.parametrize("randomise", [True, False])
def test_time_mix_matches_official_rwkv_package(randomise, monkeypatch):
    """Layers 0 and 1 (the value residual) against rwkv 0.8's RWKV_x070_TMix_seq (TorchScript,
    one sequence [T, C] at a time, zero initial state and token-shift state). Tolerance: float32,
    1e-5 relative to the output's scale (its decay constant 0.606531 rounds exp(-0.5) at 6e-7)."""
    RWKV_x070_TMix_seq = official_time_mix(monkeypatch)
    layers = [make(layer_idx=i, seed=i, randomise=randomise) for i in range(2)]
    H, N, D = layers[0].n_heads, layers[0].head_dim, layers[0].d_model
    xs = [torch.randn(2, 20, D) for _ in layers]
    ctx = MixerContext()
    with torch.no_grad():
        ours = [layer(x, ctx) for layer, x in zip(layers, xs)]
    for b in range(2):
        v_first = torch.empty(20, D)
        for i, (layer, x) in enumerate(zip(layers, xs)):
            x_prev, state = torch.zeros(D), torch.zeros(H, N, N)  # zero token-shift and wkv states
            expected, _, _, v_first = RWKV_x070_TMix_seq(i, H, N, x[b].clone(), x_prev, v_first, state,
                                                          *official_arguments(layer))
            scale = expected.abs().max()
            assert scale > 0
            assert torch.allclose(ours[i][b], expected, atol=1e-5 * scale, rtol=0), f"layer {i}, batch {b}"


# ---- the mixer contract -----------------------------------------------------------------------


def test_shapes_heads_and_invalid_sizes():
    mixer = make(d_model=32, head_dim=8)
    assert mixer.n_heads == 4
    assert mixer(torch.randn(2, 24, 32), MixerContext()).shape == (2, 24, 32)
    assert mixer(torch.randn(1, 3, 32), MixerContext()).shape == (1, 3, 32)
    assert not RWKV7TimeMix.exposes_attention
    assert not hasattr(mixer, "value_mix_base")  # layer 0 is the value source
    assert hasattr(make(layer_idx=1), "value_mix_base")
    with pytest.raises(ValueError, match="head_dim"):
        make(d_model=32, head_dim=5)
    with pytest.raises(ValueError, match="gate_lora"):
        make(gate_lora=0)


@pytest.mark.parametrize("L, t", [(24, 0), (24, 9), (24, 23), (19, 16)])
def test_causal(L, t, assert_causal):
    """Perturbing position t (through both layers) leaves every output before t unchanged."""
    layers = [make(layer_idx=i, seed=i, randomise=True) for i in range(2)]

    def forward(x):
        ctx = MixerContext()
        return layers[1](layers[0](x, ctx), ctx)

    assert_causal(forward, torch.randn(2, L, 32), t, atol=1e-5)


def test_value_residual_needs_layer_zero_in_the_same_forward():
    with pytest.raises(RuntimeError, match="v_first"):
        make(layer_idx=1)(torch.randn(2, 8, 32), MixerContext())
    ctx = MixerContext()
    make(layer_idx=0)(torch.randn(2, 8, 32), ctx)
    assert ctx.shared["v_first"].shape == (2, 8, 32)
    with pytest.raises(RuntimeError, match="v_first"):  # a stale value from another batch shape
        make(layer_idx=1)(torch.randn(3, 8, 32), ctx)


@pytest.mark.parametrize("randomise", [False, True])
def test_model_gradients_reach_every_parameter(randomise):
    """At init (small, not zero, output and down-projections) and at random weights."""
    torch.manual_seed(0)
    model = SequenceModel(3, 12, {"name": "rwkv7", **RWKV7TimeMix.small}, d_model=16, n_layers=2)
    if randomise:
        with torch.no_grad():
            for mixer in model.mixers:
                for p in mixer.parameters():
                    p.add_(0.3 * torch.randn_like(p))
    model(torch.randint(0, 3, (3, 12))).square().sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_init_keeps_rwkv7_ranges():
    mixer = make(layer_idx=1, d_model=64, head_dim=16)
    decay = torch.exp(-math.exp(-0.5) * torch.sigmoid(mixer.decay_base))
    assert 0.5 < decay.min() < 0.6 and decay.max() > 0.999  # short to long memory over the channels
    assert (mixer.shift_mix >= 0).all() and (mixer.shift_mix <= 1).all()
    assert mixer.output.abs().max() < 0.1 / 8 + 1e-7  # small, so each block starts near the identity


def test_backend_env(monkeypatch):
    mixer = make()
    assert mixer.backend == "reference"  # before any forward
    x = torch.randn(1, 6, 32)
    monkeypatch.setenv("EMERGENCE_BENCH_BACKEND", "reference")
    out = mixer(x, MixerContext())
    assert mixer.backend == "reference"
    monkeypatch.setenv("EMERGENCE_BENCH_BACKEND", "auto")
    assert torch.equal(mixer(x, MixerContext()), out) and mixer.backend == "reference"  # CPU input
    monkeypatch.setenv("EMERGENCE_BENCH_BACKEND", "kernel")
    with pytest.raises(RuntimeError, match="kernel"):
        mixer(x, MixerContext())


def test_trains_end_to_end(tmp_path, tiny_config):
    mixer = {"name": "rwkv7", "head_dim": 4, "decay_lora": 4, "a_lora": 4, "v_lora": 4, "gate_lora": 4}
    record = run(tiny_config(mixer=mixer, model={"n_layers": 2}), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["config"]["mixer"] == mixer
    assert record["backend"] == "reference"


# ---- GPU: kernel vs reference -----------------------------------------------------------------


@pytest.mark.requires_kernel(KERNEL_MODULE)
def test_kernel_matches_reference_on_gpu(monkeypatch):
    """The two-layer time mix on fla's kernel vs on our chunked reference, float32 on CUDA (forward,
    input and parameter gradients; the core op alone: tests/test_ops_rwkv7.py). Triton's float32
    dots may use TF32, so the tolerance is 1e-2 relative in norm per tensor."""

    def close(got, expected, what):
        error = (got - expected).norm() / expected.norm().clamp_min(1e-12)
        assert error < 1e-2, f"{what}: relative error {error:.2e}"

    layers = [make(layer_idx=i, d_model=64, head_dim=16, seed=i, randomise=True).cuda() for i in range(2)]
    x = torch.randn(2, 100, 64, device="cuda")

    def step(backend):
        monkeypatch.setenv("EMERGENCE_BENCH_BACKEND", backend)
        for layer in layers:
            layer.zero_grad()
        x_in = x.clone().requires_grad_()
        ctx = MixerContext()
        out = layers[1](layers[0](x_in, ctx), ctx)
        out.square().sum().backward()
        assert all(layer.backend == backend for layer in layers)
        params = {f"{i}.{name}": p.grad.clone()
                  for i, layer in enumerate(layers) for name, p in layer.named_parameters()}
        return out.detach(), x_in.grad, params

    ref_out, ref_dx, ref_params = step("reference")
    ker_out, ker_dx, ker_params = step("kernel")
    close(ker_out, ref_out, "out")
    close(ker_dx, ref_dx, "dx")
    for name in ref_params:
        close(ker_params[name], ref_params[name], f"d{name}")
