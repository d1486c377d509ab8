import pytest
import torch

from emergence_bench.config import ConfigError, resolve
from emergence_bench.engine.curriculum import pretrain
from emergence_bench.engine.module import EmergenceModule
from emergence_bench.engine.run import build_model, build_task, plan, run

DYCK = {"name": "dyck", "length": 8, "bracket_types": 2, "max_depth": 2, "batch_size": 16}
SMALL_MAP = {"name": "linear_map", "state_size": 3, "sparsity": 1, "batch_size": 16}


@pytest.fixture
def pretrained(tiny_config):
    """pretrained(tmp_path, **stage) -> (config, task, model, state before, carried, report) of a
    6-step first stage."""
    def pretrain_stage(tmp_path, **stage):
        config = plan(tiny_config(curriculum=[{"steps": 6, **stage}])).config
        task = build_task(config)
        model = build_model(config, task)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        carried, report = pretrain(config, model, task, tmp_path)
        return config, task, model, before, carried, report
    return pretrain_stage


def test_vocabulary_change_at_the_stage_switch(tmp_path, pretrained):
    _, task, model, before, _, report = pretrained(tmp_path, task=DYCK, vocab="resize")
    assert report[0]["task"] == "dyck" and report[0]["steps"] == 6
    assert before["token_embedding.weight"].shape[0] == 4  # dyck-2: 4 tokens
    assert model.token_embedding.num_embeddings == task.vocab_size == 2 and model.head.out_features == 2
    # The mixer was trained by the stage and carried over.
    assert not torch.equal(model.blocks[0].mixer.qkv.weight, before["blocks.0.mixer.qkv.weight"])


@pytest.mark.parametrize("mode", ["reinit", "resize"])
def test_set_vocab_reinitialises_or_keeps_the_shared_rows(mode, tiny_config):
    config = plan(tiny_config()).config
    model = build_model(config, build_task(config))
    old_embedding, old_head = model.token_embedding.weight.clone(), model.head.weight.clone()
    model.set_vocab(5, mode)
    assert model.token_embedding.weight.shape[0] == 5 and model.head.weight.shape[0] == 5
    kept = torch.equal(model.token_embedding.weight[:2], old_embedding) and \
        torch.equal(model.head.weight[:2], old_head)
    assert kept == (mode == "resize")


def test_optimizer_state_carries_over_only_when_asked(tmp_path, pretrained):
    _, task, model, _, carried, _ = pretrained(tmp_path / "keep", task=SMALL_MAP, reset_optimizer=False)
    assert carried is not None
    module = EmergenceModule(model, task, resolve({}).optim, 10, initial_optimizer_state=carried)
    optimizer = module.configure_optimizers()["optimizer"]
    steps = {float(state["step"]) for state in optimizer.state.values()}
    assert steps == {6.0}  # AdamW's moments continue from the stage's 6 updates
    assert optimizer.param_groups[0]["lr"] == resolve({}).optim.lr
    _, _, _, _, reset, _ = pretrained(tmp_path / "reset", task=SMALL_MAP)
    assert reset is None


def test_final_stage_is_measured_from_step_zero(tmp_path, tiny_config):
    record = run(tiny_config(curriculum=[{"task": DYCK, "steps": 15}]), tmp_path)
    assert record["status"] == "ok"
    assert record["curriculum"][0]["steps"] == 15
    assert record["timing"]["steps"] == 20  # the final stage's own budget
    assert [s for s, _ in record["emergence"]["history"]] == [10, 20]
    assert record["plateau"]["budget"] == 20
    assert (tmp_path / record["run_id"] / "tensorboard" / "stage0").is_dir()


def test_bad_curricula_fail_before_training(tiny_config):
    with pytest.raises(ConfigError, match=r"curriculum\[0\] must be a mapping with task and steps"):
        resolve({"curriculum": [{"task": DYCK}]})
    with pytest.raises(ConfigError, match=r"unknown config key 'curriculum\[0\].stepz'"):
        resolve({"curriculum": [{"task": DYCK, "steps": 3, "stepz": 1}]})
    with pytest.raises(ConfigError, match=r"curriculum\[0\].vocab must be reinit or resize"):
        resolve({"curriculum": [{"task": DYCK, "steps": 3, "vocab": "keep"}]})
    with pytest.raises(ValueError, match="reset_optimizer is false but the vocabulary changes"):
        plan(tiny_config(curriculum=[{"task": DYCK, "steps": 3, "reset_optimizer": False}]))
