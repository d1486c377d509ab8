import pytest
import torch

from emergence_bench.engine.model import SequenceModel
from emergence_bench.mixers.attention import CausalSelfAttention
from emergence_bench.mixers.base import MixerContext


def make(n_heads=4, head_dim=6, d_model=16, L=10):
    torch.manual_seed(0)
    return CausalSelfAttention(d_model=d_model, max_len=L, layer_idx=0, n_heads=n_heads, head_dim=head_dim)


def test_shapes_with_width_independent_of_d_model():
    mixer = make(n_heads=3, head_dim=5, d_model=16)
    assert mixer(torch.randn(2, 10, 16), MixerContext()).shape == (2, 10, 16)
    assert mixer.qkv.out_features == 3 * 3 * 5


@pytest.mark.parametrize("capture", [False, True])
def test_causal(capture, assert_causal):
    """Perturbing token t leaves every output before t unchanged (fast and explicit paths)."""
    mixer = make()
    assert_causal(lambda x: mixer(x, MixerContext(capture=capture)), torch.randn(2, 10, 16), 6)


def test_explicit_path_matches_fused_kernel_and_records_probabilities():
    mixer = make()
    x = torch.randn(2, 10, 16)
    ctx = MixerContext(capture=True)
    assert torch.allclose(mixer(x, MixerContext()), mixer(x, ctx), atol=1e-5)
    probs = ctx.attention[0]
    assert probs.shape == (2, 4, 10, 10)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 4, 10))
    assert (probs.triu(1) == 0).all()


def test_bias_then_softmax_then_patch():
    mixer = make(n_heads=2)
    x = torch.randn(1, 10, 16)
    target = torch.zeros(10, 10)
    target[:, 0] = 1.0
    # A huge bias on key 0 (head 0 only) sends head 0's mass there; head 1 is untouched.
    bias = torch.zeros(1, 2, 10, 10)
    bias[0, 0] = 1e4 * target
    ctx = MixerContext(bias={0: bias}, capture=True)
    mixer(x, ctx)
    assert torch.allclose(ctx.attention[0][0, 0, :, 0], torch.ones(10))
    plain = MixerContext(capture=True)
    mixer(x, plain)
    assert torch.allclose(ctx.attention[0][0, 1], plain.attention[0][0, 1])
    # A bias on a future key must not leak through the causal mask.
    future = torch.zeros(1, 2, 10, 10)
    future[..., 9] = 1e4
    leak = MixerContext(bias={0: future}, capture=True)
    mixer(x, leak)
    assert (leak.attention[0].triu(1) == 0).all()
    # The patch sees the biased probabilities and its output is what is recorded and used.
    patched = MixerContext(patch={0: lambda p: target.expand_as(p)}, capture=True)
    out = mixer(x, patched)
    assert torch.equal(patched.attention[0][0, 0], target)
    v = mixer.qkv(x).view(1, 10, 3, 2, 6)[:, :, 2].transpose(1, 2)
    expected = mixer.out((target @ v).transpose(1, 2).reshape(1, 10, 12))
    assert torch.allclose(out, expected, atol=1e-5)


def test_model_gradients_reach_every_parameter_and_model_is_causal():
    torch.manual_seed(0)
    model = SequenceModel(2, 12, {"name": "transformer", "n_heads": 2, "head_dim": 4}, d_model=16, n_layers=2)
    tokens = torch.randint(0, 2, (3, 12))
    model(tokens).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    other = tokens.clone()
    other[:, 7] ^= 1
    with torch.no_grad():
        assert torch.allclose(model(tokens)[:, :7], model(other)[:, :7], atol=1e-6)
