"""Name → entry registries, each entry checked against the registry's contract as it registers.

``Registry[T]`` holds the suite's own lists: the report's figures, check-mixer's checks, the
seed-parallel batching modes and the CLI's commands. ``PluginRegistry[C]`` holds classes that
plugins may add too: mixers, tasks and callbacks. Built-ins register themselves with a decorator::

    @register_mixer("transformer")
    class CausalSelfAttention(TokenMixer): ...

Installed distributions add entries through the entry-point groups ``emergence_bench.mixers``,
``emergence_bench.tasks`` and ``emergence_bench.callbacks``: the entry point's name is the registered
name and its object is the class. Plugins are imported only when first needed; one that fails to
import, or that does not meet the contract, is named in a warning and the rest keep working.

A built-in's name, config keys and facts are declared in its package's ``catalog.py`` (``Declared``),
so the config's checks and `list` answer without importing a built-in's module (torch, Lightning).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

if TYPE_CHECKING:  # for the types only: the mixers and tasks import this module
    from emergence_bench.mixers.base import TokenMixer
    from emergence_bench.tasks.base import SyntheticTask

T = TypeVar("T")
C = TypeVar("C", bound=type)  # the class a plugin registry holds


class UnknownNameError(KeyError):
    """A name no entry of a registry has; the message lists the known names and the closest."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def protocol_members(protocol: type) -> list[str]:
    """The names a Protocol declares (its attributes and methods, with those of the Protocols it
    extends), sorted."""
    members: set[str] = set()
    for base in protocol.__mro__:
        if base is Protocol or not getattr(base, "_is_protocol", False):
            continue
        members.update(base.__dict__.get("__annotations__", {}))
        members.update(name for name in vars(base) if not name.startswith("_") or name == "__call__")
    return sorted(members)


def unmet(entry: object, contract: type) -> str | None:
    """What ``entry`` lacks of ``contract``, in words (None when it meets it). A Protocol names the
    members it must have (a class has those its instances get from it: methods, properties, class
    attributes, and the attributes its classes annotate, which ``__init__`` sets); any other class is
    one ``entry`` must be an instance or a subclass of."""
    if getattr(contract, "_is_protocol", False):
        annotated = {name for cls in getattr(entry, "__mro__", ()) for name in vars(cls).get("__annotations__", {})}
        missing = [name for name in protocol_members(contract) if not hasattr(entry, name) and name not in annotated]
        return f"it lacks {', '.join(missing)}" if missing else None
    if isinstance(entry, type):
        return None if issubclass(entry, contract) else f"it is not a subclass of {qualified_name(contract)}"
    return None if isinstance(entry, contract) else f"it is not an instance of {qualified_name(contract)}"


def qualified_name(entry: object) -> str:
    """``module.Name`` of a class, function or module; ``a Name`` of any other object."""
    name = getattr(entry, "__qualname__", None) or getattr(entry, "__name__", None)
    if name is None:
        return f"a {type(entry).__qualname__}"
    module = getattr(entry, "__module__", None)
    return f"{module}.{name}" if module and module != name else name


class Registry(Generic[T]):
    """Name → T for one ``kind`` of entry (e.g. "figure", in messages). Every entry is checked
    against ``contract`` (a Protocol or a class, see ``unmet``) when it registers, so a malformed one
    fails where it is declared, naming what it lacks. ``names()`` is sorted; iterating, ``items()``
    and ``values()`` keep the order of registration."""

    def __init__(self, kind: str, contract: type, builtins: str | None = None) -> None:
        self.kind = kind
        self.contract = contract
        # A package whose BUILTINS names the modules that register the built-in entries, imported by
        # name when the registry is first read. Always a literal at the call: tests/test_layout.py
        # reads it there and draws these loads as imports of the module that makes the registry.
        self.builtins = builtins
        self._builtins_loaded = builtins is None
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Registers ``entry`` as ``name`` and returns it; a TypeError says what it lacks."""
        problem = self.unmet(entry)
        if problem:
            raise TypeError(f"{self.kind} {name!r} ({qualified_name(entry)}) does not meet the {self.kind} "
                            f"contract ({qualified_name(self.contract)}): {problem}")
        if name in self._entries and self._entries[name] is not entry:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that registers what it decorates as ``name`` and returns it unchanged."""

        def decorator(entry: T) -> T:
            return self.add(name, entry)

        return decorator

    def remove(self, name: str) -> None:
        """Unregisters ``name`` (a test's own entry, when it is done); an unknown name is no error."""
        self._entries.pop(name, None)

    def unmet(self, entry: object) -> str | None:
        """What ``entry`` lacks to be registered here; None when nothing."""
        return unmet(entry, self.contract)

    def get(self, name: str) -> T:
        """The entry ``name``; an unknown name raises UnknownNameError with the closest known name."""
        self._load()
        if name in self._entries:
            return self._entries[name]
        raise self.unknown(name, self.names())

    def unknown(self, name: str, known: list[str]) -> UnknownNameError:
        """The error for ``name``, none of ``known``: it lists them and names the closest."""
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return UnknownNameError(f"unknown {self.kind} {name!r}.{hint} "
                                f"Known {self.kind}s: {', '.join(known) or '(none)'}")

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        self._load()
        return list(self._entries.items())

    def values(self) -> list[T]:
        self._load()
        return list(self._entries.values())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def _load(self) -> None:
        """Import the built-ins' modules (once), each registering its own entries."""
        if self._builtins_loaded:
            return
        self._builtins_loaded = True
        for module in self.builtin_modules():
            importlib.import_module(module)

    def builtin_modules(self) -> tuple[str, ...]:
        """The built-ins' modules, in the order their package's ``BUILTINS`` lists them."""
        if self.builtins is None:
            return ()
        names = importlib.import_module(self.builtins).BUILTINS
        return tuple(f"{self.builtins}.{name}" for name in names)


@dataclass(frozen=True)
class Declared:
    """A built-in entry as its package's catalog declares it (``<package>.catalog.CATALOG``), for the
    registry to answer from without importing its module (a task's imports Lightning, a mixer's
    torch). ``keys``: a function with the constructor's signature less what the suite passes
    itself; ``facts``: the class attributes of ``FACTS`` where the class sets them. tests/test_catalog.py
    checks every entry against its class."""

    path: str  # the class, module.Name
    keys: Callable[..., None]
    facts: Mapping[str, Any] = field(default_factory=dict)


class PluginRegistry(Registry[C]):
    """A registry of classes, ``kind`` e.g. "mixer": the built-ins (the modules that ``builtins``'s
    ``BUILTINS`` names, each registering its own) and the installed plugins of entry-point ``group``,
    loaded on first use. A plugin that fails to import or to register is kept in ``broken`` with its
    error.

    A built-in's keys and facts, and whether a name is known at all, are read from the package's
    catalog without importing any entry (``known``, ``signature``, ``parameters``, ``fact``): a
    mistake in a task's key is answered without Lightning. Everything else loads them."""

    def __init__(self, kind: str, contract: type, group: str, builtins: str) -> None:
        super().__init__(kind, contract, builtins=builtins)
        self.group = group
        self._plugins_loaded = False
        self.broken: dict[str, str] = {}  # plugin name -> import error

    def add(self, name: str, entry: C) -> C:
        super().add(name, entry)
        setattr(entry, "registered_name", name)  # any class may register: not an attribute of a base
        return entry

    def unmet(self, entry: object) -> str | None:
        if not isinstance(entry, type):
            return f"it is not a class (it is a {type(entry).__qualname__})"
        return super().unmet(entry)

    def _load(self) -> None:
        """Import the built-ins and every installed plugin (once)."""
        super()._load()
        self.load_plugins()

    def load_plugins(self) -> None:
        """Import every installed plugin (once), the built-ins not: a plugin's module may declare
        more than its class (a callback's measurement), which a reader of those needs alone."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.group):
            if ep.name in self._entries or ep.name in self.catalog:
                continue
            try:
                self.add(ep.name, ep.load())
            except Exception as error:  # a broken plugin must not take the suite down
                self.broken[ep.name] = f"{type(error).__name__}: {error}"
                warnings.warn(
                    f"{self.kind} plugin {ep.name!r} ({ep.value}) failed to import: "
                    f"{self.broken[ep.name]}",
                    stacklevel=2,
                )

    @functools.cached_property
    def catalog(self) -> Mapping[str, Declared]:
        """The built-ins as their package's catalog declares them (empty where it has none)."""
        try:
            module = importlib.import_module(f"{self.builtins}.catalog")
        except ModuleNotFoundError as error:
            if error.name != f"{self.builtins}.catalog":
                raise
            return {}
        return cast(Mapping[str, Declared], module.CATALOG)

    def known(self) -> list[str]:
        """Every name it answers to, sorted, with no entry imported: the catalog's, those registered
        so far, and the installed plugins' (by their entry points)."""
        plugins = {ep.name for ep in entry_points(group=self.group)}
        return sorted(set(self.catalog) | set(self._entries) | plugins)

    def check(self, name: str) -> None:
        """Raises UnknownNameError (naming the closest) for a name it does not know, importing nothing."""
        if name not in self._entries and name not in self.known():
            raise self.unknown(name, self.known())

    def get(self, name: str) -> C:
        self.check(name)
        self._load()
        if name not in self._entries and name in self.broken:
            raise UnknownNameError(f"{self.kind} plugin {name!r} failed to import: {self.broken[name]}")
        return super().get(name)

    def signature(self, name: str) -> inspect.Signature:
        """The config keys of ``name`` as a signature: its catalog's, or its constructor's less what
        the suite passes itself (``SKIPPED_PARAMETERS``)."""
        if name in self.catalog:
            return inspect.signature(self.catalog[name].keys)
        full = inspect.signature(getattr(self.get(name), "__init__"))
        skip = SKIPPED_PARAMETERS[self.kind]
        return full.replace(parameters=[p for p in full.parameters.values() if p.name not in skip])

    def parameters(self, name: str) -> dict[str, Any]:
        """The user-settable parameters of ``name`` and their defaults (``inspect.Parameter.empty``
        when required)."""
        return {p.name: p.default for p in self.signature(name).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}

    def takes_kwargs(self, name: str) -> bool:
        """Whether ``name``'s constructor takes ``**kwargs``: then config keys it does not name pass
        through to it."""
        return any(p.kind is p.VAR_KEYWORD for p in self.signature(name).parameters.values())

    def fact(self, name: str, attribute: str) -> Any:
        """A class attribute of ``name`` that ``FACTS`` lists: its catalog's, or its class's (the
        default of ``FACTS`` where it sets none)."""
        default = FACTS[self.kind][attribute]
        if name in self.catalog:
            return self.catalog[name].facts.get(attribute, default)
        return getattr(self.get(name), attribute, default)

    def where(self, name: str) -> str:
        """Where ``name``'s class is, module.Name."""
        if name in self.catalog:
            return self.catalog[name].path
        cls = self.get(name)
        return f"{cls.__module__}.{cls.__qualname__}"


# Arguments the suite passes itself; they are not config keys.
SKIPPED_PARAMETERS = {
    "mixer": {"self", "d_model", "max_len", "layer_idx"},
    "task": {"self"},
    "callback": {"self", "task"},
}

# The class attributes a reader asks of an entry before building one (`list`, the leaderboard), with
# the value of a class that sets none.
FACTS: dict[str, dict[str, Any]] = {
    "mixer": {"exposes_attention": False, "backends": ("torch",)},
    "task": {},
    "callback": {"is_intervention": False},
}


def constructor_parameters(cls: type, skip: set[str]) -> dict[str, Any]:
    params = {}
    for p in inspect.signature(getattr(cls, "__init__")).parameters.values():
        if p.name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params[p.name] = p.default
    return params


# The contracts of the plugin kinds: what the suite calls on every one (design.md, "Contracts";
# the base classes in mixers/base.py and tasks/base.py have it all). They are checked on the class.


class MixerContract(Protocol):
    """An ``nn.Module`` built as ``cls(d_model=, max_len=, layer_idx=, **hparams)`` whose
    ``forward(x [B, L, D], ctx) -> [B, L, D]`` is causal."""

    def forward(self, x: Any, ctx: Any) -> Any: ...
    def named_parameters(self, *args: Any, **kwargs: Any) -> Any: ...
    def state_dict(self, *args: Any, **kwargs: Any) -> Any: ...
    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any: ...


class TaskContract(Protocol):
    """A LightningDataModule that draws its batches on the fly (``SyntheticTask``): everything the core
    calls on a task, so that a plugin missing one is refused when it registers, not mid-run.
    ``SyntheticTask`` (tasks/base.py) gives every member but ``generate`` and the sizes a default."""

    vocab_size: int
    seq_len: int
    loss_mask: Any  # [L] bool: the rows scored (per_sequence_scoring: the rows some sequence scores)
    per_sequence_scoring: bool  # whether scored_mask(tokens) differs per sequence
    output_cell: Any  # [L] long: each row's output cell (-1: none)
    num_cells: int
    chance_loss: float
    floor_loss: float
    max_accuracy: float
    shortcut_loss: float | None

    def configure_streams(self, data_seed: int, eval_batches: int) -> Any: ...
    def batch(self, split: str, index: int) -> Any: ...
    def model_inputs(self, tokens: Any) -> Any: ...
    def scored_mask(self, tokens: Any) -> Any: ...
    def ground_truth_attention(self) -> Any: ...
    def pattern(self, name: str) -> Any: ...
    def probe_keys(self) -> Any: ...
    def train_dataloader(self) -> Any: ...
    def val_dataloader(self) -> Any: ...


class CallbackContract(Protocol):
    """A Lightning callback built as ``cls(task=, **params)``, whose state a resumed run keeps."""

    def setup(self, *args: Any, **kwargs: Any) -> Any: ...
    def state_dict(self) -> Any: ...
    def load_state_dict(self, state_dict: Any) -> Any: ...


mixers: PluginRegistry[type[TokenMixer]] = PluginRegistry(
    "mixer", MixerContract, "emergence_bench.mixers", builtins="emergence_bench.mixers")
tasks: PluginRegistry[type[SyntheticTask]] = PluginRegistry(
    "task", TaskContract, "emergence_bench.tasks", builtins="emergence_bench.tasks")
# Any class built as cls(task=, **params): Lightning's Callback declares no such constructor.
callbacks: PluginRegistry[type] = PluginRegistry(
    "callback", CallbackContract, "emergence_bench.callbacks", builtins="emergence_bench.callbacks")

register_mixer = mixers.register
register_task = tasks.register
register_callback = callbacks.register
