import pytest
import torch

from benchmark.model import SequenceModel
from benchmark.run import run
from conftest import assert_causal, tiny_config
from mixers.base import MixerContext
from mixers.mlp_mixer import CausalMLPMixer


def make(max_len=12, d_model=8, expansion=2):
    torch.manual_seed(0)
    return CausalMLPMixer(d_model=d_model, max_len=max_len, layer_idx=0, expansion=expansion)


def test_shapes_and_no_attention():
    mixer = make(expansion=3)
    assert mixer(torch.randn(2, 12, 8), MixerContext()).shape == (2, 12, 8)
    assert mixer(torch.randn(2, 5, 8), MixerContext()).shape == (2, 5, 8)
    assert mixer.w_in.shape == (12, 3, 12) and mixer.w_out.shape == (12, 12, 3)
    assert not CausalMLPMixer.exposes_attention
    assert set(dict(mixer.named_buffers())) == {"mask_in", "mask_out"}
    assert mixer.state_dict().keys() == {"w_in", "w_out", "b_in", "b_out"}  # masks are not saved


@pytest.mark.parametrize("L, t", [(12, 0), (12, 7), (12, 11), (7, 3), (1, 0)])
def test_causal_at_full_and_shorter_length(L, t):
    """Perturbing position t leaves every output before t unchanged and changes some at/after t."""
    mixer = make(max_len=12)
    with torch.no_grad():  # non-zero biases too, so nothing hides behind a zero
        mixer.b_in.normal_()
        mixer.b_out.normal_()
    assert_causal(lambda x: mixer(x, MixerContext()), torch.randn(2, L, 8), t)


def test_causal_even_after_masked_weights_are_changed():
    mixer = make()
    with torch.no_grad():  # as if an optimiser (e.g. weight decay) touched the masked entries
        mixer.w_in.add_(1.0)
        mixer.w_out.add_(1.0)
    x = torch.randn(1, 12, 8)
    y = x.clone()
    y[:, 9] -= 2.0
    assert torch.allclose(mixer(x, MixerContext())[:, :9], mixer(y, MixerContext())[:, :9], atol=1e-5)


def test_init_scale_is_even_over_positions():
    """Fan-in scaling: early and late positions start with outputs of the same order (a fan-in of
    max_len would make positions 1-8 about 10× smaller than the second half). Single positions vary
    with their few weights, so compare averages."""
    mixer = make(max_len=64, d_model=64)
    x = torch.nn.functional.layer_norm(torch.randn(64, 64, 64), (64,))
    with torch.no_grad():
        std = mixer(x, MixerContext()).std(dim=(0, 2))  # [L]
    assert 0.2 < std.mean() < 2.0
    assert 0.5 < std[32:].mean() / std[1:9].mean() < 2.0


def test_masked_entries_start_at_zero():
    mixer = make()
    assert (mixer.w_in[~mixer.mask_in.expand_as(mixer.w_in)] == 0).all()
    assert (mixer.w_out[~mixer.mask_out.expand_as(mixer.w_out)] == 0).all()


def test_invalid_expansion_names_it():
    with pytest.raises(ValueError, match="expansion"):
        make(expansion=0)


def test_model_gradients_reach_every_parameter_and_model_is_causal():
    torch.manual_seed(0)
    model = SequenceModel(3, 12, {"name": "mlp_mixer"}, d_model=16, n_layers=2)
    tokens = torch.randint(0, 3, (3, 12))
    model(tokens).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    other = tokens.clone()
    other[:, 7] = (other[:, 7] + 1) % 3
    with torch.no_grad():
        assert torch.allclose(model(tokens)[:, :7], model(other)[:, :7], atol=1e-6)


def test_trains_end_to_end(tmp_path):
    record = run(tiny_config(mixer={"name": "mlp_mixer", "expansion": 2}), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["config"]["mixer"] == {"name": "mlp_mixer", "expansion": 2}
    assert record["backend"] == "torch"
