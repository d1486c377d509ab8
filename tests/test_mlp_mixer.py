import math

import pytest
import torch
import torch.nn.functional as F

from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import run
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.mlp_mixer import CausalMLPMixer
from emergence_bench.registry import mixers
from emergence_bench.tasks.linear_map import LinearMap

FORMS = ["static", "mlp"]


def make(max_len=12, d_model=8, token_mixing="mlp", **hparams):
    torch.manual_seed(0)
    return CausalMLPMixer(d_model=d_model, max_len=max_len, layer_idx=0, token_mixing=token_mixing, **hparams)


def perturb_parameters(mixer):
    """Non-zero biases and noisy mixing weights, so nothing hides behind a zero or a uniform row."""
    with torch.no_grad():
        for name, p in mixer.named_parameters():
            if name.startswith("b_") or name.endswith("bias") or name == "mixing":
                p.add_(torch.randn_like(p))


# --- shared by both forms ---------------------------------------------------------------------

def test_registered_once_with_static_as_default():
    assert mixers.get("mlp_mixer") is CausalMLPMixer
    assert CausalMLPMixer(d_model=8, max_len=4, layer_idx=0).token_mixing == "static"
    assert not CausalMLPMixer.exposes_attention


def test_bad_token_mixing_names_the_valid_values():
    with pytest.raises(ValueError, match="token_mixing.*static, mlp.*'attention'"):
        make(token_mixing="attention")


@pytest.mark.parametrize("token_mixing", FORMS)
@pytest.mark.parametrize("L, t", [(12, 0), (12, 7), (12, 11), (7, 3), (1, 0)])
def test_causal_at_full_and_shorter_length(token_mixing, L, t, assert_causal):
    """Perturbing position t leaves every output before t unchanged and changes some at/after t."""
    mixer = make(max_len=12, token_mixing=token_mixing)
    perturb_parameters(mixer)
    assert_causal(lambda x: mixer(x, MixerContext()), torch.randn(2, L, 8), t, atol=1e-5)


@pytest.mark.parametrize("token_mixing", FORMS)
def test_too_long_a_sequence_is_rejected(token_mixing):
    with pytest.raises(ValueError, match="max_len=12"):
        make(token_mixing=token_mixing)(torch.randn(1, 13, 8), MixerContext())


@pytest.mark.parametrize("token_mixing", FORMS)
def test_model_gradients_reach_every_parameter_and_model_is_causal(token_mixing):
    torch.manual_seed(0)
    model = SequenceModel(3, 12, {"name": "mlp_mixer", "token_mixing": token_mixing}, d_model=16, n_layers=2)
    tokens = torch.randint(0, 3, (3, 12))
    model(tokens).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    other = tokens.clone()
    other[:, 7] = (other[:, 7] + 1) % 3
    with torch.no_grad():
        assert torch.allclose(model(tokens)[:, :7], model(other)[:, :7], atol=1e-6)


# --- static: a learned [L, L] matrix per head ----------------------------------------------------

def test_static_shapes_and_parameters():
    mixer = make(max_len=12, d_model=8, token_mixing="static", n_heads=3, head_dim=5)
    assert mixer(torch.randn(2, 12, 8), MixerContext()).shape == (2, 12, 8)
    assert mixer(torch.randn(2, 5, 8), MixerContext()).shape == (2, 5, 8)
    assert mixer.mixing.shape == (3, 12, 12)
    assert mixer.value.weight.shape == (15, 8) and mixer.out.weight.shape == (8, 15)
    assert mixer.state_dict().keys() == {"value.weight", "value.bias", "mixing", "out.weight", "out.bias"}


def test_static_defaults_match_the_transformer_width():
    """Same hyperparameter names and defaults as the Transformer, so the widths match."""
    static, attention = mixers.parameters("mlp_mixer"), mixers.parameters("transformer")
    assert (static["n_heads"], static["head_dim"]) == (attention["n_heads"], attention["head_dim"])
    assert make(d_model=16, token_mixing="static").value.out_features == attention["n_heads"] * attention["head_dim"]


def test_static_matches_the_formula_per_head():
    """out = concat_h(Σ_{s≤t} M_h[t, s] v_h[s]) W_o, checked with a plain loop, on L < max_len."""
    mixer = make(max_len=9, d_model=6, token_mixing="static", n_heads=2, head_dim=3)
    perturb_parameters(mixer)
    x = torch.randn(2, 7, 6)
    v = mixer.value(x).view(2, 7, 2, 3)
    y = torch.zeros_like(v)
    for t in range(7):
        for s in range(t + 1):
            y[:, t] += mixer.mixing[:, t, s, None] * v[:, s]
    expected = mixer.out(y.reshape(2, 7, 6))
    assert torch.allclose(mixer(x, MixerContext()), expected, atol=1e-5)


def test_static_init_averages_the_visible_prefix():
    """At init every head computes what uniform causal attention computes: row t = 1/(t+1) on s ≤ t."""
    mixer = make(max_len=6, token_mixing="static", n_heads=2)
    uniform = torch.ones(6, 6).tril() / torch.arange(1, 7)[:, None]
    assert torch.allclose(mixer.mixing, uniform.expand(2, 6, 6))
    assert (mixer.mixing.sum(-1) - 1).abs().max() < 1e-6


def test_static_reset_parameters_restores_the_init():
    mixer = make(token_mixing="static")
    fresh = mixer.mixing.clone()
    perturb_parameters(mixer)
    mixer.reset_parameters()
    assert torch.equal(mixer.mixing, fresh)
    assert (mixer.value.bias.abs() <= 1 / math.sqrt(mixer.d_model)).all()  # nn.Linear's own default


def test_static_causal_even_after_masked_weights_are_changed(assert_causal):
    mixer = make(token_mixing="static")
    with torch.no_grad():  # as if an optimiser (e.g. weight decay) touched the masked entries
        mixer.mixing.add_(1.0)
    assert_causal(lambda x: mixer(x, MixerContext()), torch.randn(1, 12, 8), 9, atol=1e-5)


def test_static_mixing_matrix_learns_a_sparse_copy():
    """Output t must copy input source[t] ≤ t (random inputs, so no position code helps): the
    learned M concentrates each row on its source, starting from uniform averaging."""
    torch.manual_seed(0)
    mixer = make(max_len=8, d_model=4, token_mixing="static", n_heads=1, head_dim=4)
    source = torch.tensor([0, 1, 2, 1, 4, 5, 1, 1])
    optimizer = torch.optim.Adam(mixer.parameters(), lr=1e-2)
    for _ in range(200):
        x = torch.randn(64, 8, 4)
        loss = (mixer(x, MixerContext()) - x[:, source]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss < 1e-3
    weights = (mixer.mixing[0] * mixer.mask).detach().abs()  # [t, s]
    assert torch.equal(weights.argmax(-1), source)
    assert (weights.max(-1).values / weights.sum(-1) > 0.9).all()


def test_static_learns_a_one_sparse_linear_map():
    """With s=1 each output cell copies one cell of the previous state. A SequenceModel with the
    static form learns it in a few hundred steps (chance is ln 2). (The pre-norm makes each value a
    position-dependent code of its token, so even the uniform init carries the answer; the test above
    is the one that pins down the mixing matrix itself.)"""
    torch.manual_seed(0)
    task = LinearMap(state_size=6, sparsity=1, batch_size=64)
    mixer = {"name": "mlp_mixer", "token_mixing": "static", "n_heads": 4, "head_dim": 8}
    model = SequenceModel(task.vocab_size, task.seq_len, mixer, d_model=32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    mask = task.loss_mask

    def scored_loss(tokens):
        logits = model(tokens[:, :-1])[:, mask]  # the logit at row p predicts token p + 1
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:][:, mask].flatten())

    for step in range(300):
        loss = scored_loss(task.batch("train", step))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        assert scored_loss(task.batch("eval", 0)) < 0.1


# --- mlp: the token-mixing MLP -------------------------------------------------------------------

def test_mlp_shapes():
    mixer = make(expansion=3)
    assert mixer(torch.randn(2, 12, 8), MixerContext()).shape == (2, 12, 8)
    assert mixer(torch.randn(2, 5, 8), MixerContext()).shape == (2, 5, 8)
    assert mixer.w_in.shape == (12, 3, 12) and mixer.w_out.shape == (12, 12, 3)
    assert set(dict(mixer.named_buffers())) == {"mask_in", "mask_out"}
    assert mixer.state_dict().keys() == {"w_in", "w_out", "b_in", "b_out"}  # masks are not saved


def test_mlp_causal_even_after_masked_weights_are_changed():
    mixer = make()
    with torch.no_grad():  # as if an optimiser (e.g. weight decay) touched the masked entries
        mixer.w_in.add_(1.0)
        mixer.w_out.add_(1.0)
    x = torch.randn(1, 12, 8)
    y = x.clone()
    y[:, 9] -= 2.0
    assert torch.allclose(mixer(x, MixerContext())[:, :9], mixer(y, MixerContext())[:, :9], atol=1e-5)


def test_mlp_init_scale_is_even_over_positions():
    """Fan-in scaling: early and late positions start with outputs of the same order (a fan-in of
    max_len would make positions 1-8 about 10× smaller than the second half). Single positions vary
    with their few weights, so compare averages."""
    mixer = make(max_len=64, d_model=64)
    x = torch.nn.functional.layer_norm(torch.randn(64, 64, 64), (64,))
    with torch.no_grad():
        std = mixer(x, MixerContext()).std(dim=(0, 2))  # [L]
    assert 0.2 < std.mean() < 2.0
    assert 0.5 < std[32:].mean() / std[1:9].mean() < 2.0


def test_mlp_masked_entries_start_at_zero():
    mixer = make()
    assert (mixer.w_in[~mixer.mask_in.expand_as(mixer.w_in)] == 0).all()
    assert (mixer.w_out[~mixer.mask_out.expand_as(mixer.w_out)] == 0).all()


@pytest.mark.parametrize("bad", [{"expansion": 0}, {"n_heads": 0}, {"head_dim": 0}])
def test_invalid_sizes_name_the_parameter(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        make(**bad)


@pytest.mark.parametrize("token_mixing", FORMS)
def test_trains_end_to_end(token_mixing, tmp_path, tiny_config):
    record = run(tiny_config(mixer={"name": "mlp_mixer", "token_mixing": token_mixing, "expansion": 2}), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["config"]["mixer"] == {"name": "mlp_mixer", "token_mixing": token_mixing,
                                         "n_heads": 8, "head_dim": 8, "expansion": 2,
                                         "mixing_init": "uniform"}
    assert record["backend"] == "torch"


def test_the_static_mixing_matrix_follows_the_named_init_only_when_asked():
    from emergence_bench.engine.model import SequenceModel
    from emergence_bench.mixers.init import WeightInit

    torch.manual_seed(0)
    uniform, scheme = (SequenceModel(2, 16, {"name": "mlp_mixer", "mixing_init": m}, d_model=16,
                                     init=WeightInit("lecun_normal")).mixers[0] for m in ("uniform", "scheme"))
    rows = torch.arange(1, 17, dtype=torch.float)[:, None]
    assert torch.allclose(uniform.mixing[0], torch.ones(16, 16).tril() / rows)
    visible = torch.ones(16, 16, dtype=torch.bool).tril()
    assert float(scheme.mixing[:, ~visible].abs().max()) == 0.0  # masked entries stay zero
    assert float(scheme.mixing[:, visible].std()) == pytest.approx(16 ** -0.5, rel=0.1)  # N(0, 1/max_len)
    with pytest.raises(ValueError, match="mixing_init"):
        SequenceModel(2, 16, {"name": "mlp_mixer", "mixing_init": "zeros"}, d_model=16)
