from types import SimpleNamespace

import pytest
import torch

from emergence_bench.callbacks.attention_distillation import AttentionDistillation
from emergence_bench.config import ConfigError
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import plan, run

TASK = {"name": "linear_map", "state_size": 4, "sparsity": 1, "batch_size": 64}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_config):
    """A teacher that has learned the pattern (its attention maps are saved by the probe)."""
    out = tmp_path_factory.mktemp("teacher")
    record = run(tiny_config(task=TASK, trainer={"max_steps": 200, "eval_every": 50}, optim={"lr": 3e-3}), out)
    assert record["attention_probe"]["pattern_found_step"] is not None
    return out / record["run_id"]


def test_the_bias_is_the_teachers_strongest_head_per_key(teacher):
    from emergence_bench.tasks.linear_map import LinearMap

    task = LinearMap(**{k: v for k, v in TASK.items() if k != "name"})
    callback = AttentionDistillation(task, teacher=str(teacher), strength=2.0, heads=[1])
    model = SequenceModel(2, task.seq_len, {"name": "transformer", "n_heads": 2, "head_dim": 4}, d_model=16)
    module = SimpleNamespace(model=model, device=torch.device("cpu"), attention_bias={})
    callback.setup(None, module, "fit")
    callback.on_train_batch_start(SimpleNamespace(global_step=0, max_steps=10), module, None, 0)
    maps = torch.load(teacher / "attention_maps.pt")["maps"][0]  # [H, L, L]
    expected = maps.amax(0) / maps.amax(0).amax(-1, keepdim=True).clamp_min(1e-12)
    bias = module.attention_bias[0][0]
    assert torch.allclose(bias[1], 2.0 * expected) and torch.equal(bias[0], torch.zeros_like(bias[0]))
    # The teacher looked where the truth is: its strongest key per scored row is a true source.
    truth = task.ground_truth_attention().bool()
    rows = task.loss_mask
    assert truth[rows].gather(1, expected[rows].argmax(-1, keepdim=True)).float().mean() >= 0.75


def test_a_student_trains_with_the_teachers_pattern(teacher, tmp_path, tiny_config):
    config = tiny_config(task=TASK, trainer={"max_steps": 100, "eval_every": 50}, optim={"lr": 3e-3},
                         callbacks={"attention_distillation": {"teacher": str(teacher), "strength": 5.0}})
    record = run(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    report = record["attention_distillation"]
    assert report["applicable"] and report["teacher"] == str(teacher) and report["steps_applied"] == 100


def test_bad_teachers_are_rejected_before_training(tmp_path, tiny_config):
    with pytest.raises(ConfigError, match="attention_distillation.teacher is required"):
        plan(tiny_config(callbacks={"attention_distillation": {}}))
    with pytest.raises(ValueError, match="must be a run folder holding attention_maps.pt"):
        plan(tiny_config(callbacks={"attention_distillation": {"teacher": str(tmp_path)}}))
