"""Name → class registries for mixers, tasks and callbacks, with lazily loaded plugins.

Built-ins register themselves with a decorator::

    @register_mixer("transformer")
    class CausalSelfAttention(TokenMixer): ...

Installed distributions add entries through the entry-point groups ``emergence_bench.mixers``,
``emergence_bench.tasks`` and ``emergence_bench.callbacks``: the entry point's name is the registered
name and its object is the class. Plugins are imported only when first needed; one that fails to
import is named in a warning and the rest keep working.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import warnings
from importlib.metadata import entry_points
from typing import Any, TypeVar

C = TypeVar("C", bound=type)  # a registered class: the decorator returns it as it was

class UnknownNameError(KeyError):
    """An unknown mixer/task/callback name; the message lists the known names."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class Registry:
    """One kind of pluggable component (``kind`` is e.g. "mixer")."""

    def __init__(self, kind: str, group: str, builtin_package: str):
        self.kind = kind
        self.group = group
        self.builtin_package = builtin_package
        self._classes: dict[str, type] = {}
        self._plugins_loaded = False
        self.broken: dict[str, str] = {}  # plugin name -> import error

    def register(self, name: str):
        def decorator(cls: C) -> C:
            if name in self._classes and self._classes[name] is not cls:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._classes[name] = cls
            setattr(cls, "registered_name", name)  # any class may register: not an attribute of a base
            return cls

        return decorator

    def _load(self) -> None:
        """Import the built-ins and every installed plugin (once)."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        importlib.import_module(self.builtin_package)
        for ep in entry_points(group=self.group):
            if ep.name in self._classes:
                continue
            try:
                self._classes[ep.name] = ep.load()
                setattr(self._classes[ep.name], "registered_name", ep.name)
            except Exception as error:  # a broken plugin must not take the suite down
                self.broken[ep.name] = f"{type(error).__name__}: {error}"
                warnings.warn(
                    f"{self.kind} plugin {ep.name!r} ({ep.value}) failed to import: "
                    f"{self.broken[ep.name]}",
                    stacklevel=2,
                )

    def names(self) -> list[str]:
        self._load()
        return sorted(self._classes)

    def get(self, name: str) -> type:
        self._load()
        if name in self._classes:
            return self._classes[name]
        if name in self.broken:
            raise UnknownNameError(f"{self.kind} plugin {name!r} failed to import: {self.broken[name]}")
        known = ", ".join(self.names()) or "(none)"
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownNameError(f"unknown {self.kind} {name!r}.{hint} Known {self.kind}s: {known}")

    def parameters(self, name: str) -> dict[str, Any]:
        """The user-settable parameters of ``name`` and their defaults (``inspect.Parameter.empty``
        when required)."""
        return constructor_parameters(self.get(name), skip=SKIPPED_PARAMETERS[self.kind])


# Arguments the suite passes itself; they are not config keys.
SKIPPED_PARAMETERS = {
    "mixer": {"self", "d_model", "max_len", "layer_idx"},
    "task": {"self"},
    "callback": {"self", "task"},
}


def constructor_parameters(cls: type, skip: set[str]) -> dict[str, Any]:
    params = {}
    for p in inspect.signature(getattr(cls, "__init__")).parameters.values():
        if p.name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params[p.name] = p.default
    return params


mixers = Registry("mixer", "emergence_bench.mixers", "emergence_bench.mixers")
tasks = Registry("task", "emergence_bench.tasks", "emergence_bench.tasks")
callbacks = Registry("callback", "emergence_bench.callbacks", "emergence_bench.callbacks")

register_mixer = mixers.register
register_task = tasks.register
register_callback = callbacks.register
