"""Plugin configuration: keys for a **kwargs constructor, a mixer without parameters, and a mixer
renamed over a section that holds another mixer's keys."""

import warnings

import pytest
import yaml
from torch import nn

from emergence_bench.config import ConfigError, resolve, set_dotted
from emergence_bench.engine.model import SequenceModel
from emergence_bench.execution.sweep_spec import load_sweep
from emergence_bench.mixers.base import TokenMixer
from emergence_bench.registry import register_mixer


@register_mixer("test_kwargs_only")
class KwargsOnly(TokenMixer):
    """A wrapper that hands every key to another library's layer (here: keeps them)."""

    def __init__(self, d_model, max_len, layer_idx, **kwargs):
        super().__init__(d_model, max_len, layer_idx)
        self.kwargs = kwargs
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, ctx):
        return self.proj(x)


@register_mixer("test_named_and_kwargs")
class NamedAndKwargs(KwargsOnly):
    def __init__(self, d_model, max_len, layer_idx, width: int = 8, **kwargs):
        super().__init__(d_model, max_len, layer_idx, **kwargs)
        self.width = width


@register_mixer("test_no_parameters")
class NoParameters(TokenMixer):
    def forward(self, x, ctx):
        return x


def test_keys_a_kwargs_constructor_does_not_name_pass_through_recorded_and_with_a_warning():
    with pytest.warns(UserWarning, match=r"mixer.n_heads passes unchecked to mixer 'test_kwargs_only', whose "
                                         r"constructor takes \*\*kwargs"):
        config = resolve({"mixer": {"name": "test_kwargs_only", "n_heads": 4}})
    assert config.mixer.to_dict() == {"name": "test_kwargs_only", "n_heads": 4}  # recorded as given (and in the run id)
    assert config.run_id() != resolve({"mixer": {"name": "test_kwargs_only"}}).run_id()
    model = SequenceModel(2, 8, config.mixer.to_dict(), d_model=8)
    assert model.mixers[0].kwargs == {"n_heads": 4}  # and they reach the constructor


def test_named_keys_beside_kwargs_are_still_checked_and_defaulted():
    with pytest.warns(UserWarning, match=r"mixer.a, mixer.b pass unchecked"):
        config = resolve({"mixer": {"name": "test_named_and_kwargs", "a": 1, "b": "x"}})
    assert config.mixer.to_dict() == {"name": "test_named_and_kwargs", "a": 1, "b": "x", "width": 8}
    with pytest.raises(ConfigError, match="mixer.width must be of type int"):
        resolve({"mixer": {"name": "test_named_and_kwargs", "width": "wide"}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # named keys alone: nothing unchecked, no warning
        resolve({"mixer": {"name": "test_named_and_kwargs", "width": 4}})


def test_a_key_for_a_mixer_without_parameters_says_it_takes_none():
    with pytest.raises(ConfigError) as error:
        resolve({"mixer": {"name": "test_no_parameters", "n_heads": 4}})
    message = str(error.value)
    assert "unknown config key 'mixer.n_heads': mixer 'test_no_parameters' takes no parameters" in message
    assert "d_model, layer_idx, max_len, which the suite passes itself" in message
    assert "valid keys here" not in message  # not an empty list


def test_renaming_the_mixer_over_another_mixers_keys_says_whose_they_are():
    data = {"mixer": {"name": "transformer", "n_heads": 2, "head_dim": 4}}
    with pytest.raises(ConfigError) as error:
        set_dotted(data, "mixer.name", "mamba")
    assert str(error.value) == (
        "mixer.name 'mamba' replaces 'transformer', but the mixer section still holds mixer.n_heads, "
        "mixer.head_dim, which 'mamba' does not take: these keys belong to 'transformer'; "
        "use --mixer '{name: mamba}' to replace the section")
    with pytest.raises(ConfigError, match=r"it takes \*\*kwargs: they would pass to it unchecked"):
        set_dotted(data, "mixer.name", "test_kwargs_only")
    set_dotted(data, "mixer.name", "gated_deltanet")  # keys it takes too carry over, as before
    assert resolve(data).mixer.params["n_heads"] == 2
    set_dotted(data, "mixer", {"name": "mamba"})  # the whole section: replaced
    assert resolve(data).mixer.name == "mamba"


def test_renaming_the_task_over_another_tasks_keys_says_whose_they_are():
    data = {"task": {"name": "linear_map", "state_size": 4, "sparsity": 2}}
    with pytest.raises(ConfigError, match=r"task.sparsity, which 'cellular_automata' does not take: this key "
                                          r"belongs to 'linear_map'; use --task '\{name: cellular_automata\}'"):
        set_dotted(data, "task.name", "cellular_automata")


def test_a_sweep_flag_renaming_the_mixer_names_the_keys(tmp_path, tiny_config):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "s", "base": tiny_config(), "grid": {"seed": [0, 1]}}))
    sweep = load_sweep(sweep_file)
    with pytest.raises(ConfigError, match="these keys belong to 'transformer'"):
        sweep.override({"mixer.name": "mamba"})


@pytest.mark.slow
def test_the_command_line_names_the_keys_before_anything_runs(tmp_path, cli, tiny_config):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config()))
    result = cli("run", "--config", config, "--out", tmp_path / "runs", "--mixer.name", "mamba")
    assert result.returncode == 2 and not (tmp_path / "runs").exists()
    assert "these keys belong to 'transformer'; use --mixer '{name: mamba}' to replace the section" in result.stderr
