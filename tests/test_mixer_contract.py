"""The TokenMixer contract, checked for every registered mixer (built-ins and installed plugins)."""

import pytest
import torch

from emergence_bench import registry
from emergence_bench.run import run
from conftest import assert_causal, tiny_config
from emergence_bench.mixers.base import MixerContext

D, L = 16, 12
# Small hyper-parameters per mixer so the contract runs fast; unknown mixers use their defaults.
# A mixer with several forms is checked in each ("name:form" -> its name and hyper-parameters).
SMALL = {
    "transformer": {"n_heads": 2, "head_dim": 4},
    "mlp_mixer": {"token_mixing": "static", "n_heads": 2, "head_dim": 4},
    "mlp_mixer:mlp": {"token_mixing": "mlp", "expansion": 2},
    "mamba": {"d_state": 4, "expand": 2},
    "gated_deltanet": {"n_heads": 2, "head_dim": 8, "expand_v": 1},
    "rwkv7": {"head_dim": 8},
}
MIXERS = [name for name in registry.mixers.names() if not name.startswith("test_")]
MIXERS += [form for form in SMALL if ":" in form and form.split(":")[0] in MIXERS]


def build(name: str, layer_idx: int = 0, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return registry.mixers.get(name.split(":")[0])(d_model=D, max_len=L, layer_idx=layer_idx,
                                                   **SMALL.get(name, {}))


@pytest.mark.parametrize("name", MIXERS)
def test_shape_causality_and_determinism(name):
    mixer = build(name)
    x = torch.randn(2, L, D)
    out = mixer(x, MixerContext())
    assert out.shape == (2, L, D) and torch.isfinite(out).all()
    assert_causal(lambda x: mixer(x, MixerContext()), x, 7, atol=1e-5)
    assert torch.equal(build(name)(x, MixerContext()), out)  # same seed, same numbers


@pytest.mark.parametrize("name", MIXERS)
def test_attention_it_exposes_has_its_stated_heads_and_is_causal(name):
    mixer = build(name)
    if not getattr(mixer, "exposes_attention", False):
        pytest.skip("exposes no attention scores")
    ctx = MixerContext(capture=True)
    mixer(torch.randn(2, L, D), ctx)
    probs = ctx.attention[0]
    assert isinstance(mixer.n_heads, int) and probs.shape == (2, mixer.n_heads, L, L)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, mixer.n_heads, L))
    assert probs.triu(1).abs().max() == 0  # no query attends to a later key


@pytest.mark.parametrize("name", MIXERS)
def test_every_parameter_gets_a_gradient(name):
    # Two layers, so a mixer that passes values from layer 0 to later layers through ctx is exercised.
    first, second = build(name, 0), build(name, 1, seed=1)
    ctx = MixerContext()
    x = torch.randn(2, L, D)
    (second(first(x, ctx), ctx) ** 2).sum().backward()
    for layer in (first, second):
        for pname, p in layer.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, f"{pname} gets no gradient"


@pytest.mark.parametrize("name", MIXERS)
def test_state_dict_loads_into_a_fresh_module(name):
    trained, fresh = build(name, seed=0), build(name, seed=1)
    x = torch.randn(2, L, D)
    fresh.load_state_dict(trained.state_dict())
    assert torch.equal(fresh(x, MixerContext()), trained(x, MixerContext()))


@pytest.mark.parametrize("name", MIXERS)
def test_a_short_run_lowers_the_loss(name, tmp_path):
    config = tiny_config(mixer={"name": name.split(":")[0], **SMALL.get(name, {})},
                         task={"name": "linear_map", "state_size": 4, "sparsity": 1, "batch_size": 64},
                         trainer={"max_steps": 60, "eval_every": 60}, optim={"lr": 3e-3})
    record = run(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["metrics"]["final_eval_loss"] < 0.9 * 0.6931  # below chance
    assert record["backend"] in registry.mixers.get(name.split(":")[0]).backends
