"""RunConfig: the one config schema behind `run` and `sweep`.

A config is a nested dict (YAML) with the sections below; ``resolve`` validates every key (an unknown
key is an error naming it), fills every default — including the task's, mixer's and callbacks'
constructor defaults — and returns the fully resolved RunConfig that each run saves beside its result.
A plugin whose constructor takes ``**kwargs`` gets the keys it does not name as given, with a warning
that they are unchecked.

Over 400 lines, on purpose: the schema, its resolution and its YAML reading are one contract (every
key a run can take and every error a bad key gets), read and changed together.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import importlib.util
import inspect
import json
import math
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args, get_origin, get_type_hints

import yaml

from emergence_bench import registry


class ConfigError(ValueError):
    """A config key or value the suite cannot accept; the message names it."""


Schedule = Literal["constant", "cosine", "linear"]  # the lr after warmup: constant, or decayed to 0 at max_steps
Accelerator = Literal["auto", "cpu", "gpu", "cuda"]  # cuda: the same as gpu
TrainOn = Literal["scored", "all"]  # the rows the training loss covers: the task's scored ones, or every row
# The order of a batch's sequences in the step: as drawn, or reversed. The same losses and gradients
# summed in another float order (docs/ladder-history.md's float-order comparison): another draw of the
# last bits that training amplifies, not another experiment.
BatchOrder = Literal["drawn", "reversed"]
Logger = Literal["tensorboard", "csv", "wandb"]  # Lightning's own loggers (emergence_bench.engine.trainer.build_logger)
# The named weight inits (mixers/init.py applies them); declared here, with the schema, so that the
# config is checked without importing torch.
InitScheme = Literal["torch_default", "lecun_normal", "normal"]
SCHEMES: tuple[str, ...] = get_args(InitScheme)
Batching = Literal["auto", "always"]  # seed-parallel: batch when a probe says it pays, or always (a sweep file's)


def check_choices(section: object, prefix: str) -> None:
    """Each ``Literal``-typed field of the dataclass ``section`` holds one of its values; else a
    ConfigError naming the key (``prefix`` + field), the value and the values allowed."""
    for name, hint in get_type_hints(type(section)).items():
        value = getattr(section, name, None)
        if get_origin(hint) is Literal and value not in get_args(hint):
            allowed = ", ".join(str(choice) for choice in get_args(hint))
            raise ConfigError(f"{prefix}{name} must be one of {allowed}, got {value!r}")


class Section:
    """A config section: its fixed choices (``Literal`` fields) are checked when it is made."""

    key: ClassVar[str]  # its name in a config, e.g. "model"

    def __post_init__(self) -> None:
        check_choices(self, f"{self.key}.")


@dataclass
class ModelConfig(Section):
    key: ClassVar[str] = "model"
    d_model: int = 64
    n_layers: int = 1
    mlp_ratio: int = 4
    init: InitScheme = "lecun_normal"  # mixers/init.py
    init_std: float = 0.02  # the std of `normal`
    init_scale: float = 1.0  # multiplies every weight the init sets


@dataclass
class OptimConfig(Section):
    key: ClassVar[str] = "optim"
    lr: float = 1.0e-3
    weight_decay: float = 0.01
    warmup_steps: int = 0
    schedule: Schedule = "constant"  # decay to 0 at max_steps, after warmup
    grad_clip: float = 1.0  # 0 disables clipping
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass
class TrainerConfig(Section):
    key: ClassVar[str] = "trainer"
    max_steps: int = 1000
    eval_every: int = 50
    eval_batches: int = 4
    log_every: int = 10
    accelerator: Accelerator = "auto"
    compile: bool = False  # torch.compile the model's forward (see `emergence-bench speed` for its effect)
    train_on: TrainOn = "scored"  # the paper: all
    batch_order: BatchOrder = "drawn"  # reversed: the same batches summed in another float order
    threads: int | Literal["auto"] = "auto"  # torch intra-op threads: auto (see choose_threads) or N; not in the run id
    logger: Logger = "tensorboard"  # where Lightning logs the curves; not in the run id
    keep_freed_memory: bool = True  # the allocator policy (emergence_bench.machine.allocator); not in the run id
    resume_every_s: float = 300.0  # seconds of training between resume points (0: none); not in the run id


@dataclass
class CheckpointConfig(Section):
    key: ClassVar[str] = "checkpoints"
    every: int = 0  # keep weights every N steps (0: not on a fixed grid)
    log_spaced: bool = False  # and at steps 1, 2, 4, 8, ...


TRAIN_ON: tuple[str, ...] = get_args(TrainOn)
DEFAULT_TASK, DEFAULT_MIXER = "linear_map", "transformer"
DEFAULT_CALLBACKS: dict[str, dict[str, Any]] = {"plateau": {}, "emergence": {}, "attention_probe": {}}


@dataclass(frozen=True)
class Component:
    """A registered component (a task, a mixer, a callback) as a resolved config names it: its
    registry name and the keyword arguments its constructor gets, every default filled in from the
    constructor's signature (``resolve``). In a config file it is one mapping, ``{name: ..., **params}``."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, **copy.deepcopy(self.params)}


@dataclass(frozen=True)
class CurriculumStage:
    """A curriculum stage (``resolve_stage``): train ``task`` for ``steps`` steps, then move on."""

    task: Component
    steps: int
    vocab: Literal["reinit", "resize"] = "reinit"  # the embeddings and head when the next vocabulary differs
    reset_optimizer: bool = True  # whether the next stage starts with a fresh AdamW state

    def to_dict(self) -> dict:
        return {"task": self.task.to_dict(), "steps": self.steps, "vocab": self.vocab,
                "reset_optimizer": self.reset_optimizer}


@dataclass
class RunConfig:
    seed: int = 0
    task: Component = field(default_factory=lambda: Component(DEFAULT_TASK))
    mixer: Component = field(default_factory=lambda: Component(DEFAULT_MIXER))
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoints: CheckpointConfig = field(default_factory=CheckpointConfig)
    curriculum: tuple[CurriculumStage, ...] = ()  # stages trained before `task` (see resolve_stage)
    callbacks: tuple[Component, ...] = field(
        default_factory=lambda: tuple(Component(name, dict(params)) for name, params in DEFAULT_CALLBACKS.items()))

    def to_dict(self) -> dict:
        """The config as its file says it: every section a mapping, ``callbacks`` one by name."""
        data = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        data["optim"]["betas"] = list(data["optim"]["betas"])
        return {"seed": self.seed, "task": self.task.to_dict(), "mixer": self.mixer.to_dict(), **data,
                "curriculum": [stage.to_dict() for stage in self.curriculum],
                "callbacks": {c.name: copy.deepcopy(c.params) for c in self.callbacks}}

    def callback(self, name: str) -> Component | None:
        """The callback of that name, None when the config has none."""
        return next((c for c in self.callbacks if c.name == name), None)

    def run_id(self) -> str:
        """A stable id: the same resolved config always gets the same id (so sweeps resume). The keys
        of NOT_HASHED change how fast a run goes, not what it computes, and are left out."""
        digest = hashlib.sha256(json.dumps(hashed_config(self.to_dict()), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.task.name}-{self.mixer.name}-seed{self.seed}-{digest}"


# Keys left out of the run id: saved in config.yaml and the result, but a run that differs only in
# them is the same run (so changing `--threads` resumes a sweep, and no run id changed when they came):
# how fast it goes, where its curves are logged and how often it saves a point to resume from (see
# emergence_bench.engine.resume_point), never what it computes.
NOT_HASHED = {"trainer": ("threads", "logger", "keep_freed_memory", "resume_every_s")}


# Keys added after runs were recorded, left out of the run id while they hold the value that computes
# what those runs computed (so no earlier run id changed when they came), and hashed once set to
# anything else. A task's (in the run's task and each curriculum stage's) and a mixer's by its name:
# name -> {key: that value}; the trainer's: {key: that value}. The value is not always today's
# default: Gated DeltaNet defaults to a faster chunking than ladder v2 ran (a new float order, so a
# new run id), and ladder v2's presets name the old one.
ADDED_TASK_KEYS: dict[str, dict[str, Any]] = {"dyck": {"score": "all"}}
ADDED_MIXER_KEYS: dict[str, dict[str, Any]] = {"mlstm": {"quadratic_up_to": 64}, "gated_deltanet": {"chunk_size": 32}}
ADDED_TRAINER_KEYS: dict[str, Any] = {"batch_order": "drawn"}


def hashed_config(data: dict) -> dict:
    """A copy of a config dict (``RunConfig.to_dict()``, or a result's ``config``) without the keys of
    NOT_HASHED, nor the added keys (ADDED_*_KEYS) at their earlier value: what the run id hashes,
    and what rows of the same run should be compared by."""
    data = copy.deepcopy(data)
    for section, keys in NOT_HASHED.items():
        for key in keys:
            (data.get(section) or {}).pop(key, None)
    stages = [data] + list(data.get("curriculum") or [])
    components = [(stage.get("task"), ADDED_TASK_KEYS) for stage in stages] + [(data.get("mixer"), ADDED_MIXER_KEYS)]
    for component, added in components:
        if isinstance(component, dict):
            _drop_earlier(component, added.get(str(component.get("name")), {}))
    if isinstance(data.get("trainer"), dict):
        _drop_earlier(data["trainer"], ADDED_TRAINER_KEYS)
    return data


def _drop_earlier(section: dict, earlier: dict[str, Any]) -> None:
    """Remove from ``section`` the keys that hold the value ``earlier`` gives them."""
    for key, value in earlier.items():
        if key in section and section[key] == value:
            del section[key]


SECTIONS = {"model": ModelConfig, "optim": OptimConfig, "trainer": TrainerConfig, "checkpoints": CheckpointConfig}


def _unknown_key(key: str, known: Iterable[str], whose: str = "") -> ConfigError:
    """``key`` is not one of ``known`` (``whose``: the component they are of, e.g. "mixer 'lru'", named
    where the section alone would not say it, as in a sweep of several mixers)."""
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown config key {key!r}{hint}; valid keys here{f' ({whose})' if whose else ''}: "
                       f"{', '.join(sorted(known))}")


def _no_parameters(key: str, reg: registry.PluginRegistry[Any], name: str) -> ConfigError:
    """A key for a component whose constructor has no config keys at all (not even ``**kwargs``)."""
    passed = ", ".join(sorted(registry.SKIPPED_PARAMETERS[reg.kind] - {"self"}))
    suite = f" (its constructor takes only {passed}, which the suite passes itself)" if passed else ""
    return ConfigError(f"unknown config key {key!r}: {reg.kind} {name!r} takes no parameters{suite}; "
                       f"to make {key.rsplit('.', 1)[-1]!r} a config key, add it to the constructor's "
                       f"keyword arguments")


def _check_type(key: str, value: Any, default: Any) -> Any:
    """Coerce ``value`` to the type of ``default`` where that is safe (int → float, list → tuple)."""
    if default is None or default is inspect.Parameter.empty or value is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(value)
    # Strings like "all" may stand for lists; components check those themselves.
    if isinstance(default, (int, float, tuple)) and not isinstance(value, type(default)):
        raise ConfigError(f"{key} must be of type {type(default).__name__}, got {value!r}")
    return value


def _resolve_named(section: str, data: Any, reg: registry.PluginRegistry[Any],
                   default_name: str | None = None) -> Component:
    """``{name: ..., **params}`` → the same with every constructor default filled in (a missing name
    is ``default_name``, so ``--task.state_size 16`` alone keeps the default task)."""
    if isinstance(data, str):
        data = {"name": data}
    if isinstance(data, dict) and "name" not in data and default_name is not None:
        data = {"name": default_name, **data}
    if not isinstance(data, dict) or "name" not in data:
        raise ConfigError(f"{section} must be a mapping with a 'name' key, got {data!r}")
    params = reg.parameters(data["name"])  # a built-in's from its catalog: no component imported
    # A constructor with **kwargs says it takes keys it does not name (a plugin wrapping another
    # library's layer, say): those pass through to it, recorded in the resolved config (and the run
    # id) as given, with a warning, since the suite can check neither their names nor their types.
    open_ended = reg.takes_kwargs(data["name"])
    resolved, unchecked = {"name": data["name"]}, []
    # The keys a user may give here: the parameters, and `name` but in a callback (its key is its name).
    known = [*params, *(() if section.startswith("callbacks.") else ("name",))]
    for key, value in data.items():
        if key == "name":
            continue
        if key not in params and open_ended:
            resolved[key] = value
            unchecked.append(f"{section}.{key}")
        elif key not in params:
            raise (_unknown_key(f"{section}.{key}", known, f"{reg.kind} {data['name']!r}")
                   if params or difflib.get_close_matches(key, known, n=1)
                   else _no_parameters(f"{section}.{key}", reg, data["name"]))
        else:
            resolved[key] = _check_type(f"{section}.{key}", value, params[key])
    if unchecked:
        warnings.warn(f"{', '.join(unchecked)} {'pass' if len(unchecked) > 1 else 'passes'} unchecked to "
                      f"{reg.kind} {data['name']!r}, whose constructor takes **kwargs: neither the name nor "
                      f"the type is checked, and defaults it does not name are not recorded", stacklevel=3)
    for key, default in params.items():
        if key not in resolved:
            if default is inspect.Parameter.empty:
                raise ConfigError(f"{section}.{key} is required for {section} {data['name']!r}")
            resolved[key] = default
    name = resolved.pop("name")
    return Component(name, resolved)


def _resolve_section(name: str, data: Any, cls: type[Any]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{name} must be a mapping, got {data!r}")
    defaults = cls()
    fields = {f.name for f in dataclasses.fields(cls)}
    hints = get_type_hints(cls)
    values = {}
    for key, value in data.items():
        if key not in fields:
            raise _unknown_key(f"{name}.{key}", fields)
        if value is None and hints[key] is not Any and type(None) not in get_args(hints[key]):
            raise ConfigError(f"{name}.{key} must be set, got null (its default: {getattr(defaults, key)!r})")
        values[key] = _check_type(f"{name}.{key}", value, getattr(defaults, key))
    return cls(**values)


STAGE_DEFAULTS = {"vocab": "reinit", "reset_optimizer": True}


def resolve_stage(i: int, stage: Any) -> CurriculumStage:
    """A curriculum stage ``{task: {...}, steps: N, vocab: reinit|resize, reset_optimizer: bool}``:
    train ``task`` for ``steps`` steps, then move on. ``vocab`` says what happens to the embeddings
    and head when the next task's vocabulary differs (re-initialised, or resized keeping the shared
    rows); ``reset_optimizer`` whether the next stage starts with a fresh AdamW state."""
    key = f"curriculum[{i}]"
    if not isinstance(stage, dict) or "task" not in stage or "steps" not in stage:
        raise ConfigError(f"{key} must be a mapping with task and steps, got {stage!r}")
    for name in stage:
        if name not in {"task", "steps", *STAGE_DEFAULTS}:
            raise _unknown_key(f"{key}.{name}", {"task", "steps", *STAGE_DEFAULTS})
    resolved = {**STAGE_DEFAULTS, **{k: stage[k] for k in STAGE_DEFAULTS if k in stage}}
    if not isinstance(stage["steps"], int) or isinstance(stage["steps"], bool) or stage["steps"] < 1:
        raise ConfigError(f"{key}.steps must be an int ≥ 1, got {stage['steps']!r}")
    if resolved["vocab"] not in ("reinit", "resize"):
        raise ConfigError(f"{key}.vocab must be reinit or resize, got {resolved['vocab']!r}")
    if not isinstance(resolved["reset_optimizer"], bool):
        raise ConfigError(f"{key}.reset_optimizer must be true or false, got {resolved['reset_optimizer']!r}")
    return CurriculumStage(_resolve_named(f"{key}.task", stage["task"], registry.tasks, DEFAULT_TASK), stage["steps"],
                 resolved["vocab"], resolved["reset_optimizer"])


def _stages(curriculum: Any) -> list:
    """The ``curriculum`` key: a list of stages (none: null or an empty list), never read item by
    item from a string or a mapping."""
    if curriculum is None:
        return []
    if not isinstance(curriculum, list):
        raise ConfigError("curriculum must be a list of stages, each {task: {...}, steps: N}, e.g. "
                          f"[{{task: {{name: linear_map}}, steps: 500}}]; got {curriculum!r}")
    return curriculum


def _resolve_callbacks(data: Any) -> tuple[Component, ...]:
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"callbacks must be a mapping of callback name to its keys (or true, or null to switch "
                          f"it off), e.g. {{plateau: {{frac: 0.1}}}}; got {data!r}")
    merged = copy.deepcopy(DEFAULT_CALLBACKS)
    for name, params in (data or {}).items():
        merged[name] = params
    resolved = []
    for name, params in merged.items():
        if params is None or params is False:  # `callbacks: {name: null}` switches one off
            continue
        if params is True:
            params = {}
        if not isinstance(params, dict):
            raise ConfigError(f"callbacks.{name} must be a mapping of its keys, true, or null (off); got {params!r}")
        resolved.append(_resolve_named("callbacks." + name, {"name": name, **params}, registry.callbacks))
    return tuple(resolved)


def resolve(data: dict | RunConfig | None = None) -> RunConfig:
    """Validate a nested dict and return the fully resolved RunConfig."""
    if isinstance(data, RunConfig):
        data = data.to_dict()
    data = copy.deepcopy(data or {})
    top = {f.name for f in dataclasses.fields(RunConfig)}
    for key in data:
        if key not in top:
            raise _unknown_key(key, top)
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed must be a whole number in [0, 2**32) (numpy's seed range), got {seed!r}")
    # Every key and its type is checked without importing a component: the fixed sections are
    # declared here, and a built-in task's, mixer's or callback's keys in its package's catalog.
    sections = resolve_sections(data)
    mixer = _resolve_named("mixer", data.get("mixer", {}), registry.mixers, DEFAULT_MIXER)
    config = RunConfig(
        seed=seed,
        task=_resolve_named("task", data.get("task", {}), registry.tasks, DEFAULT_TASK),
        mixer=mixer,
        **sections,
        curriculum=tuple(resolve_stage(i, stage) for i, stage in enumerate(_stages(data.get("curriculum")))),
        callbacks=_resolve_callbacks(data.get("callbacks")),
    )
    check_finite(config.to_dict())
    return config


def resolve_sections(data: dict) -> dict[str, Any]:
    """The fixed sections of config dict ``data`` (model, optim, trainer, checkpoints) resolved and
    checked, keys and values, with no component imported: the CLI's first check of what it was given."""
    sections = {name: _resolve_section(name, data.get(name), cls) for name, cls in SECTIONS.items()}
    check_finite({name: data.get(name) for name in SECTIONS})
    _check_values(**sections)
    return sections


def check_finite(data: Any, key: str = "") -> None:
    """Every float in a config is finite: NaN or ±inf (YAML's .nan, a flag's ``nan`` or ``1e999``), in
    any section, plugin keys included, is refused here, before a run folder is made."""
    if isinstance(data, float) and not math.isfinite(data):
        raise ConfigError(f"{key or 'a config value'} must be a finite number, got {data}")
    if isinstance(data, dict):
        for name, value in data.items():
            check_finite(value, f"{key}.{name}" if key else str(name))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            check_finite(value, f"{key}[{i}]")


def _check_values(model: ModelConfig, optim: OptimConfig, trainer: TrainerConfig,
                  checkpoints: CheckpointConfig) -> None:
    """The fixed sections' values: bounds, the init, the lr, the threads, the logger's package."""
    t, o, m = trainer, optim, model
    for key, value, low in [
        ("trainer.max_steps", t.max_steps, 1), ("trainer.eval_every", t.eval_every, 1),
        ("trainer.eval_batches", t.eval_batches, 1), ("trainer.log_every", t.log_every, 1),
        ("model.d_model", m.d_model, 1), ("model.n_layers", m.n_layers, 1),
        ("model.mlp_ratio", m.mlp_ratio, 1), ("optim.warmup_steps", o.warmup_steps, 0),
        ("checkpoints.every", checkpoints.every, 0), ("trainer.resume_every_s", t.resume_every_s, 0),
    ]:
        if value < low:
            raise ConfigError(f"{key} must be ≥ {low}, got {value}")
    # (model.init is a Literal, checked as the section was made)
    for name, positive in (("model.init_std", m.init_std), ("model.init_scale", m.init_scale), ("optim.lr", o.lr)):
        if not positive > 0:
            raise ConfigError(f"{name} must be > 0, got {positive}")
    if len(o.betas) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                                    for b in o.betas):
        raise ConfigError(f"optim.betas must be two numbers in [0, 1) (AdamW's beta1 and beta2), got {list(o.betas)}")
    check_threads(t.threads)  # the choices (Literal fields) were checked as each section was made
    if t.logger == "wandb" and importlib.util.find_spec("wandb") is None:
        raise ConfigError("trainer.logger wandb needs the wandb package: pip install -e '.[wandb]' "
                          "(or choose tensorboard or csv)")


# --- threads ----------------------------------------------------------------------------------
def check_threads(threads: object) -> None:
    """``trainer.threads`` is ``auto`` or an int ≥ 1 (its upper bound, the cores a run has, is
    checked where it runs: see choose_threads)."""
    if threads == "auto":
        return
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ConfigError(f"trainer.threads must be auto or an int ≥ 1 (at most the cores a run has), "
                          f"got {threads!r}")



# --- dotted keys ------------------------------------------------------------------------------
def set_dotted(data: dict, key: str, value: object) -> None:
    """``set_dotted(d, "task.state_size", 16)`` sets d["task"]["state_size"] (creating sections)."""
    *parents, leaf = key.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if isinstance(child, str) and part in ("task", "mixer"):
            child = {"name": child}
        if child is None:
            child = {}
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {key!r}: {part!r} is not a section")
        node[part] = child
        node = child
    if leaf == "name" and len(parents) == 1 and parents[0] in RENAMED_SECTIONS:
        _check_rename(parents[0], node, value)
    node[leaf] = value


RENAMED_SECTIONS: dict[str, registry.PluginRegistry[Any]] = {"task": registry.tasks, "mixer": registry.mixers}


def _check_rename(section: str, node: dict, name: object) -> None:
    """``--mixer.name X`` over a section that holds another mixer's keys (a config file's): name
    the keys X does not take and whose they are, rather than a bare "unknown key" later."""
    old, stale = node.get("name"), [k for k in node if k != "name"]
    if not isinstance(old, str) or not isinstance(name, str) or old == name or not stale:
        return
    reg = RENAMED_SECTIONS[section]
    try:
        params = reg.parameters(name)
        open_ended = reg.takes_kwargs(name)
    except registry.UnknownNameError:
        return  # resolve says so, with the closest known name
    foreign = [f"{section}.{k}" for k in stale if k not in params]
    if not foreign:  # the keys fit the new one too (e.g. n_heads, head_dim): they carry over
        return
    whose = "these keys belong" if len(foreign) > 1 else "this key belongs"
    through = " (it takes **kwargs: they would pass to it unchecked)" if open_ended else ""
    raise ConfigError(f"{section}.name {name!r} replaces {old!r}, but the {section} section still holds "
                      f"{', '.join(foreign)}, which {name!r} does not take{through}: {whose} to {old!r}; "
                      f"use --{section} '{{name: {name}}}' to replace the section")


class YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader (YAML 1.1), except that ``1e-3``, ``3e-4`` and ``-2E+5`` are floats, as in
    YAML 1.2 and Python: YAML 1.1 reads a float only with a dot (``1.0e-3``), the rest as strings;
    and a key given twice in one mapping is an error (PyYAML keeps the last value silently)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults`: a key given here overrides the merged one, as YAML says
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (list, dict)) and key in first:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice in one mapping (first at line {first[key] + 1})",
                        key_node.start_mark)
                first.setdefault(key, key_node.start_mark.line)
        return super().construct_mapping(node, deep=deep)


YamlLoader.add_implicit_resolver(  # (a subclass's resolvers are its own copy: yaml.safe_load is untouched)
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml_text(text: str) -> Any:
    """``text`` read as YAML by ``YamlLoader`` (every config, sweep file and flag value goes through it)."""
    return yaml.load(text, Loader=YamlLoader)  # noqa: S506 (a SafeLoader)


def dump_yaml(data: object) -> str:
    """``data`` as block YAML in its own key order: what ``config.yaml`` and ``--print-config`` hold."""
    return yaml.safe_dump(data, sort_keys=False)


def parse_value(text: str) -> Any:
    """A command-line value as YAML: ``16`` → int, ``1e-3`` → float, ``[1, 3e-4]`` → list.
    ConfigError, naming the value, where it is not YAML (or gives a key twice)."""
    try:
        return load_yaml_text(text)
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"the value {text!r} is not valid YAML: {problem}") from None


def load_yaml(path: str | Path) -> dict:
    """A config (or sweep) file's mapping; ConfigError naming the file where it is a folder, missing,
    not YAML, empty (or only comments) or not a mapping."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a config file: give a YAML file")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8"))
        if data is None:
            raise ConfigError(f"{path}: the file holds no config, it is empty or only comments (a YAML "
                              "mapping is expected: task, mixer, optim, ...)")
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path} is not valid YAML{where}: {getattr(error, 'problem', None) or error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping, got {type(data).__name__}")
    return data
