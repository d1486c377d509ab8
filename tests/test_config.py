import pytest

from emergence_bench.config import ConfigError, parse_value, resolve, set_dotted
from emergence_bench.engine.run import plan
from emergence_bench.registry import UnknownNameError


def test_defaults_are_resolved_in_full():
    config = resolve({})
    assert config.task.to_dict() == {"name": "linear_map", "state_size": 8, "sparsity": 3, "trajectory_length": 2,
                           "task_seed": 0, "batch_size": 128, "blank_outputs": False, "matrix": None}
    assert config.mixer.to_dict() == {"name": "transformer", "n_heads": 8, "head_dim": 8}
    assert config.callback("plateau").params["frac"] == 0.1 and config.callback("emergence").params["threshold"] == 0.95
    assert resolve(config.to_dict()) == config  # a saved config resolves to itself


def test_run_id_is_stable_and_changes_with_the_config():
    assert resolve({}).run_id() == resolve({"seed": 0}).run_id()
    assert resolve({}).run_id() != resolve({"seed": 1}).run_id()
    assert resolve({}).run_id() != resolve({"task": {"name": "linear_map", "sparsity": 2}}).run_id()


@pytest.mark.parametrize("data, key", [
    ({"sed": 1}, "'sed'"),
    ({"task": {"name": "linear_map", "state_sise": 4}}, "'task.state_sise'"),
    ({"mixer": {"name": "transformer", "heads": 4}}, "'mixer.heads'"),
    ({"optim": {"learning_rate": 0.1}}, "'optim.learning_rate'"),
    ({"trainer": {"steps": 10}}, "'trainer.steps'"),
    ({"callbacks": {"plateau": {"frc": 0.2}}}, "'callbacks.plateau.frc'"),
])
def test_unknown_keys_are_named(data, key):
    with pytest.raises(ConfigError, match=key):
        resolve(data)


def test_unknown_names_list_the_known_ones_and_the_closest():
    with pytest.raises(UnknownNameError, match=r"Did you mean 'transformer'.*Known mixers: .*transformer"):
        resolve({"mixer": {"name": "transfromer"}})
    with pytest.raises(UnknownNameError, match=r"Did you mean 'linear_map'"):
        resolve({"task": "linear-map"})
    with pytest.raises(UnknownNameError, match=r"unknown callback 'nope'"):
        resolve({"callbacks": {"nope": {}}})


def test_wrong_types_and_ranges():
    with pytest.raises(ConfigError, match="task.state_size must be of type int"):
        resolve({"task": {"name": "linear_map", "state_size": "big"}})
    with pytest.raises(ConfigError, match="trainer.max_steps must be ≥ 1"):
        resolve({"trainer": {"max_steps": 0}})
    with pytest.raises(ConfigError, match="optim.schedule"):
        resolve({"optim": {"schedule": "exponential"}})
    assert resolve({"optim": {"lr": 1}}).optim.lr == 1.0  # ints are fine where floats are expected


@pytest.mark.parametrize("section, key, bad, allowed", [
    ("model", "init", "xavier", "torch_default, lecun_normal, normal"),
    ("optim", "schedule", "cosin", "constant, cosine, linear"),
    ("trainer", "accelerator", "tpu", "auto, cpu, gpu, cuda"),
    ("trainer", "train_on", "everything", "scored, all"),
    ("trainer", "logger", "mlflow", "tensorboard, csv, wandb"),
])
def test_a_bad_choice_names_the_key_the_value_and_the_choices(section, key, bad, allowed):
    with pytest.raises(ConfigError) as raised:
        resolve({section: {key: bad}})
    assert str(raised.value) == f"{section}.{key} must be one of {allowed}, got {bad!r}"
    from emergence_bench.config import SECTIONS

    with pytest.raises(ConfigError, match=f"^{section}.{key} must be one of"):  # made directly, too
        SECTIONS[section](**{key: bad})
    first = allowed.split(", ")[0]
    assert getattr(getattr(resolve({section: {key: first}}), section), key) == first


def test_invalid_task_parameters_fail_before_training():
    with pytest.raises(ValueError, match=r"sparsity must be in \[1, 4\], got 5"):
        plan({"task": {"name": "linear_map", "state_size": 4, "sparsity": 5}})
    with pytest.raises(ValueError, match="n_heads and head_dim must be ≥ 1"):
        plan({"mixer": {"name": "transformer", "n_heads": 0}})


def test_dotted_overrides_and_values():
    data = {"task": "linear_map"}
    set_dotted(data, "task.state_size", parse_value("16"))
    set_dotted(data, "optim.lr", parse_value("3e-4"))
    set_dotted(data, "callbacks.plateau.threshold", parse_value("1.3"))
    config = resolve(data)
    assert config.task.params["state_size"] == 16 and config.optim.lr == 3e-4
    assert config.callback("plateau").params["threshold"] == 1.3
    assert parse_value("[1, 2]") == [1, 2] and parse_value("true") is True and parse_value("cosine") == "cosine"


def test_a_parameter_flag_alone_keeps_the_default_task_and_mixer():
    data = {}
    set_dotted(data, "task.state_size", 5)
    set_dotted(data, "mixer.n_heads", 2)
    config = resolve(data)
    assert config.task.name == "linear_map" and config.task.params["state_size"] == 5
    assert config.mixer.to_dict() == {"name": "transformer", "n_heads": 2, "head_dim": 8}
