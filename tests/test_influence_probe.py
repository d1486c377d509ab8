import torch
from torch import nn

from emergence_bench.callbacks.influence_probe import influence_maps
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import run
from emergence_bench.mixers.base import TokenMixer
from emergence_bench.registry import register_mixer


@register_mixer("test_shift")
class Shift(TokenMixer):
    """out_t = W x_{t-1}: a known mixing pattern (one step back)."""

    def __init__(self, d_model, max_len, layer_idx):
        super().__init__(d_model, max_len, layer_idx)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, ctx):
        return self.proj(nn.functional.pad(x, (0, 0, 1, 0))[:, : x.shape[1]])


def test_influence_of_a_fixed_shift_is_the_shift():
    torch.manual_seed(0)
    model = SequenceModel(2, 10, {"name": "test_shift"}, d_model=8, n_layers=2)
    (first, second) = influence_maps(model, torch.randint(0, 2, (4, 10)))
    shift = torch.diag(torch.ones(9), -1)  # row i has its 1 at column i - 1
    assert torch.allclose(first, shift, atol=1e-4) and torch.allclose(second, shift, atol=1e-4)


def test_influence_agrees_with_attention_on_a_trained_transformer_and_runs_for_any_mixer(tmp_path, tiny_config):
    task = {"name": "linear_map", "state_size": 4, "sparsity": 1, "batch_size": 64}
    config = tiny_config(task=task, trainer={"max_steps": 200, "eval_every": 50}, optim={"lr": 3e-3},
                         callbacks={"influence_probe": {"probe_size": 8, "found_mass": 0.4}})
    record = run(config, tmp_path)
    influence, attention = record["influence_probe"], record["attention_probe"]
    assert attention["pattern_found_step"] is not None  # the transformer learned the pattern ...
    assert influence["pattern_found_step"] is not None  # ... and the influence map sees it too
    # Perturbing a key also moves every row's softmax, so influence is more spread than attention.
    assert influence["final_mass"][0] >= 0.4 and max(attention["final_mass"][0]) >= 0.5
    # Before training the influence is spread out: the first eval's mass is below the last.
    assert influence["history"][0][1] < influence["final_mass"][0]
    other = run({**config, "mixer": {"name": "mlp_mixer"}}, tmp_path)
    assert other["status"] == "ok" and len(other["influence_probe"]["final_mass"]) == 1
