"""Registries: an entry is checked against its registry's contract when it registers (a Protocol's
members, or a class), a malformed one fails naming what it lacks, and each of the suite's lists
(figures, checks, batching modes, commands) is such a registry."""

from __future__ import annotations

import sys
from typing import Protocol, get_args

import pytest
from torch import nn

from emergence_bench import registry
from emergence_bench.registry import PluginRegistry, Registry, UnknownNameError


class Greeter(Protocol):
    name: str

    def greet(self, whom: str) -> str: ...


class English:
    name = "english"

    def greet(self, whom: str) -> str:
        return f"hello {whom}"


class Mute:
    name = "mute"


def test_an_entry_that_meets_the_protocol_registers_and_get_returns_it():
    greeters: Registry[Greeter] = Registry("greeter", Greeter)
    english = English()
    assert greeters.register("english")(english) is english
    assert greeters.get("english") is english and greeters["english"] is english
    assert "english" in greeters and greeters.names() == ["english"] and greeters.values() == [english]


def test_an_entry_that_lacks_a_member_of_the_protocol_fails_naming_it():
    greeters: Registry[Greeter] = Registry("greeter", Greeter)
    with pytest.raises(TypeError, match=r"greeter 'mute' \(a Mute\) does not meet the greeter contract "
                                        r"\(.*Greeter\): it lacks greet"):
        greeters.add("mute", Mute())
    assert "mute" not in greeters  # nothing half-registered


def test_a_class_contract_asks_for_an_instance_and_a_name_registers_once():
    numbers: Registry[int] = Registry("number", int)
    numbers.add("one", 1)
    with pytest.raises(TypeError, match="number 'two' .* it is not an instance of builtins.int"):
        numbers.add("two", "2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="number 'one' is registered twice"):
        numbers.add("one", 2)
    with pytest.raises(UnknownNameError, match="unknown number 'ones'. Did you mean 'one'"):
        numbers.get("ones")


def test_registration_order_is_kept_and_names_are_sorted():
    numbers: Registry[int] = Registry("number", int)
    for name, value in (("b", 2), ("a", 1), ("c", 3)):
        numbers.add(name, value)
    assert list(numbers) == ["b", "a", "c"] and numbers.values() == [2, 1, 3] and numbers.names() == ["a", "b", "c"]


def test_a_mixer_that_is_no_module_fails_at_registration_naming_what_it_lacks():
    class NoModule:
        def forward(self, x, ctx):
            return x

    with pytest.raises(TypeError, match=r"mixer 'test_no_module' .* does not meet the mixer contract "
                                        r"\(emergence_bench.registry.MixerContract\): it lacks load_state_dict, "
                                        r"named_parameters, state_dict"):
        registry.register_mixer("test_no_module")(NoModule)
    with pytest.raises(TypeError, match=r"it is not a class \(it is a function\)"):
        registry.register_mixer("test_a_function")(lambda d_model, max_len, layer_idx: nn.Identity())
    assert "test_no_module" not in registry.mixers.names()


def test_the_built_in_mixers_tasks_and_callbacks_meet_their_contracts_and_get_returns_the_class():
    from emergence_bench.mixers.attention import CausalSelfAttention

    assert registry.mixers.get("transformer") is CausalSelfAttention
    for kind in (registry.mixers, registry.tasks, registry.callbacks):
        assert kind.names() and not kind.broken
        for name in kind.names():
            assert kind.unmet(kind.get(name)) is None, name


PLUGINS = '''
from torch import nn


class Shift(nn.Module):
    def __init__(self, d_model, max_len, layer_idx):
        super().__init__()

    def forward(self, x, ctx):
        return x


class Half:
    def forward(self, x, ctx):
        return x
'''


def test_a_plugin_that_does_not_meet_the_contract_is_named_as_broken_and_the_rest_work(tmp_path, monkeypatch,
                                                                                         fake_distribution):
    site = fake_distribution(tmp_path / "site", PLUGINS, "[emergence_bench.test_mixers]\n"
                                                       "shift = fake_mixers:Shift\nhalf = fake_mixers:Half\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "fake_mixers", raising=False)
    plugins: PluginRegistry[type] = PluginRegistry("mixer", registry.MixerContract, "emergence_bench.test_mixers",
                                                   "emergence_bench.mixers")
    with pytest.warns(UserWarning, match=r"mixer plugin 'half' \(fake_mixers:Half\) failed to import: TypeError: "
                                         r".*it lacks load_state_dict, named_parameters, state_dict"):
        assert plugins.names() == ["shift"]
    assert plugins.get("shift").registered_name == "shift"  # type: ignore[attr-defined]
    with pytest.raises(UnknownNameError, match="mixer plugin 'half' failed to import: TypeError"):
        plugins.get("half")
    monkeypatch.delitem(sys.modules, "fake_mixers", raising=False)


def test_the_suites_lists_are_registries_of_their_entries():
    from emergence_bench.commands import mixer_checks
    from emergence_bench.config import Batching
    from emergence_bench.engine.seed_parallel import BATCHING, BATCHING_MODES
    from emergence_bench.reporting.figure import REGISTRY, ReportFigure
    from emergence_bench.reporting.figures import FIGURES

    assert list(BATCHING_MODES) == list(BATCHING) == list(get_args(Batching))
    assert all(isinstance(figure, ReportFigure) for figure in REGISTRY.values()) and set(FIGURES) <= set(REGISTRY)
    assert mixer_checks.check_names()[:3] == ["builds", "shape", "causal"]  # the table's order
    with pytest.raises(TypeError, match="figure 'test_not_a_figure' .* it is not an instance of "
                                        "emergence_bench.reporting.figure.ReportFigure"):
        REGISTRY.add("test_not_a_figure", "curves")  # type: ignore[arg-type]
