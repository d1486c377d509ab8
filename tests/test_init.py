"""model.init: each named scheme is applied, scaled, recorded and grouped; mixers own their init."""

import math

import pytest
import torch
from torch import nn

from emergence_bench.config import ConfigError, resolve
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import build_model, build_task, run
from emergence_bench.mixers.base import TokenMixer
from emergence_bench.mixers.init import WeightInit
from emergence_bench.registry import register_mixer
from emergence_bench.reporting import leaderboard


def model_for(init: str, **model) -> SequenceModel:
    config = resolve({"model": {"d_model": 128, "init": init, **model}})
    torch.manual_seed(0)
    return build_model(config, build_task(config))


def std(tensor: torch.Tensor) -> float:
    return float(tensor.detach().std())


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_each_scheme_sets_the_weights_it_names(scale):
    fan_in = 128
    lecun, default, normal = (model_for(s, init_scale=scale, init_std=0.05) for s in
                              ("lecun_normal", "torch_default", "normal"))
    # lecun_normal: N(0, 1/fan_in) Linear weights, zero biases, N(0, 0.02) embeddings.
    assert std(lecun.blocks[0].mixer.qkv.weight) == pytest.approx(scale / math.sqrt(fan_in), rel=0.03)
    assert std(lecun.blocks[0].mlp[0].weight) == pytest.approx(scale / math.sqrt(fan_in), rel=0.03)
    assert std(lecun.token_embedding.weight) == pytest.approx(0.02 * scale, rel=0.3)
    assert float(lecun.blocks[0].mixer.qkv.bias.detach().abs().max()) == 0.0
    # torch_default: U(±1/√fan_in) Linear weights (std 1/√(3·fan_in)), N(0, 1) embeddings.
    assert std(default.blocks[0].mixer.qkv.weight) == pytest.approx(scale / math.sqrt(3 * fan_in), rel=0.03)
    assert std(default.position_embedding.weight) == pytest.approx(scale, rel=0.05)
    # normal: N(0, std) everywhere.
    assert std(normal.blocks[0].mixer.out.weight) == pytest.approx(0.05 * scale, rel=0.05)
    assert std(normal.head.weight) == pytest.approx(0.05 * scale, rel=0.3)
    for model in (lecun, default, normal):  # norms always start at ones and zeros
        assert torch.equal(model.norm.weight, torch.ones(128)) and torch.equal(model.norm.bias, torch.zeros(128))


def test_bad_init_settings_are_rejected_up_front():
    for model, match in [({"init": "xavier"}, "model.init must be one of"), ({"init_scale": 0}, "init_scale"),
                         ({"init_std": -1.0}, "init_std")]:
        with pytest.raises(ConfigError, match=match):
            resolve({"model": model})


@register_mixer("test_constant_init")
class ConstantInit(TokenMixer):
    """A plugin mixer with its own init and no init_weights: the model must leave it alone."""

    def __init__(self, d_model, max_len, layer_idx):
        super().__init__(d_model, max_len, layer_idx)
        self.proj = nn.Linear(d_model, d_model)
        self.embed = nn.Embedding(3, d_model)
        nn.init.constant_(self.proj.weight, 0.125)
        nn.init.constant_(self.embed.weight, -0.5)

    def forward(self, x, ctx):
        return self.proj(x)


def test_the_model_never_touches_a_mixers_own_init():
    for scheme in ("lecun_normal", "torch_default", "normal"):
        model = SequenceModel(2, 8, {"name": "test_constant_init"}, d_model=16, n_layers=2,
                              init=WeightInit(scheme, scale=3.0))
        for mixer in model.mixers:
            assert torch.all(mixer.proj.weight == 0.125) and torch.all(mixer.embed.weight == -0.5)


def test_built_in_mixers_keep_their_architecture_specific_init():
    torch.manual_seed(0)
    model = SequenceModel(2, 8, {"name": "mamba", "d_state": 4}, d_model=16, init=WeightInit("normal", std=0.3))
    mamba = model.mixers[0]
    # Mamba's S4D-real A and D stay; its generic projections follow the scheme.
    assert torch.allclose(mamba.A_log.exp()[0], torch.arange(1, 5, dtype=torch.float))
    assert torch.all(mamba.D == 1.0) and std(mamba.in_proj.weight) == pytest.approx(0.3, rel=0.1)
    torch.manual_seed(0)
    rwkv = SequenceModel(2, 8, {"name": "rwkv7", "head_dim": 8}, d_model=16, init=WeightInit("normal", std=0.3))
    torch.manual_seed(0)
    plain = SequenceModel(2, 8, {"name": "rwkv7", "head_dim": 8}, d_model=16, init=WeightInit("lecun_normal"))
    # RWKV-7 keeps its official init whatever the scheme (same RNG stream up to the mixer's build).
    assert torch.equal(rwkv.mixers[0].key, plain.mixers[0].key)


def test_the_init_is_recorded_and_different_inits_are_different_leaderboard_rows(tmp_path, tiny_config):
    records = [run(tiny_config(seed=seed, model={"init": init}, trainer={"max_steps": 5, "eval_every": 5}),
                   tmp_path) for init in ("lecun_normal", "torch_default") for seed in (0, 1)]
    assert [r["config"]["model"]["init"] for r in records] == ["lecun_normal"] * 2 + ["torch_default"] * 2
    table = leaderboard.build(records)
    assert len(table) == 2 and list(table["seeds"]) == [2, 2]
    assert sorted(table["setting"]) == ["model.init=lecun_normal", "model.init=torch_default"]
