"""Each built-in mixer, task and callback is declared in its package's catalog (``<package>/catalog.py``)
as its class is: the same class path, the same config keys with the same defaults and annotations,
the same facts. The config resolves keys, and `list` and the leaderboard read facts, from the
catalog alone, so that a mistake in a key is answered without importing torch or Lightning."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from emergence_bench import registry

KINDS = [registry.mixers, registry.tasks, registry.callbacks]


def builtins(reg: registry.PluginRegistry) -> dict[str, type]:
    """The registered classes that ship with the suite (not a test's or a plugin's)."""
    return {name: cls for name, cls in reg.items() if cls.__module__.startswith(f"{reg.builtins}.")}


def described(parameter: inspect.Parameter) -> tuple:
    """A parameter as the config reads it: its name, kind, default (with its type: 2 is not 2.0 in a
    run id) and annotation (as written)."""
    annotation = parameter.annotation
    if not isinstance(annotation, str):
        annotation = inspect.formatannotation(annotation)
    return parameter.name, parameter.kind, parameter.default, type(parameter.default), annotation


@pytest.mark.parametrize("reg", KINDS, ids=lambda reg: reg.kind)
def test_the_catalog_names_every_built_in_and_nothing_else(reg):
    assert sorted(reg.catalog) == sorted(builtins(reg))


@pytest.mark.parametrize("reg", KINDS, ids=lambda reg: reg.kind)
def test_each_entry_is_its_class_path_keys_and_facts(reg):
    for name, cls in builtins(reg).items():
        declared = reg.catalog[name]
        assert declared.path == f"{cls.__module__}.{cls.__qualname__}", name
        constructor = [p for p in inspect.signature(cls.__init__).parameters.values()
                       if p.name not in registry.SKIPPED_PARAMETERS[reg.kind]]
        assert [described(p) for p in inspect.signature(declared.keys).parameters.values()] == [
            described(p) for p in constructor], f"{reg.kind} {name}: copy its constructor's keys into its catalog"
        assert set(declared.facts) <= set(registry.FACTS[reg.kind]), name
        for attribute, default in registry.FACTS[reg.kind].items():
            assert reg.fact(name, attribute) == getattr(cls, attribute, default), (name, attribute)


def test_a_name_no_entry_has_is_refused_without_importing_one():
    with pytest.raises(registry.UnknownNameError, match=r"unknown task 'linear_mpa'. Did you mean 'linear_map'\?"):
        registry.tasks.parameters("linear_mpa")


READ = """
import sys
from emergence_bench import registry
for reg in (registry.mixers, registry.tasks, registry.callbacks):
    for name in reg.known():
        reg.parameters(name), reg.takes_kwargs(name), reg.where(name)
        [reg.fact(name, attribute) for attribute in registry.FACTS[reg.kind]]
print(sorted(m for m in ("torch", "lightning") if m in sys.modules))
"""


def test_reading_every_built_ins_keys_and_facts_imports_neither_torch_nor_lightning(tmp_path):
    result = subprocess.run([sys.executable, "-c", READ], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
