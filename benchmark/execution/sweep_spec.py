"""What a sweep is, as written: a base config plus a grid over dotted keys, in groups, with a ranking
preset's tuning; loaded from a preset or a YAML file and checked before anything runs.

A sweep file (or preset in ``benchmark/presets/``) is::

    name: quick
    description: ...
    runs: 8                                            # optional: the run count, checked on load
    base: {seed: 0, task: {...}, mixer: {...}, ...}     # a run config
    grid: {seed: [0, 1, 2], task.sparsity: [2, 3]}     # Cartesian product applied to base
    groups:                                            # optional: several experiments in one file
      - {name: ca, base: {task: {name: cellular_automata}}, grid: {task.state_size: [4, 8]}}
      - name: lm
        base: {task: {name: linear_map}}
        mixers: {transformer: {n_heads: 8, head_dim: 8}}  # optional: keys for one mixer in this group

A group's base is merged into the sweep's base (a task or mixer with another name replaces it), its
grid extends the sweep's grid, and its runs are written under ``DIR/<group name>/``. A group's
``mixers`` sets keys of the named mixers in its runs only (the heads a family needs, where one shape
does not suit every family); a ``--mixer.KEY`` given on the command line still wins.

A ranking preset may add ``tuning:`` (how each mixer's learning rate is chosen per group) and
``tuned:`` (the frozen choices): each run then trains at its mixer's tuned values for its group, and
a mixer without them is tuned first (emergence_bench.execution.tuning). How a sweep runs is
``emergence_bench.execution.sweep``.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from emergence_bench.config import Batching, ConfigError, RunConfig, TrainerConfig, check_choices, load_yaml, set_dotted

if TYPE_CHECKING:  # the run module plans; a sweep only lists its runs
    from emergence_bench.engine.run import RunPlan

PRESETS_DIR = Path(__file__).parents[1] / "presets"


def merge(base: dict, override: dict) -> dict:
    """``override`` deep-merged into a copy of ``base``; a task or mixer section with another
    ``name`` replaces the base's section instead (its parameters would not apply)."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        old = merged.get(key)
        renamed = key in ("task", "mixer") and isinstance(value, dict) and isinstance(old, dict) \
            and value.get("name", old.get("name")) != old.get("name")
        if isinstance(value, dict) and isinstance(old, dict) and not renamed:
            merged[key] = merge(old, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


Rung = Literal["middle", "all"]


@dataclass
class Tuning:
    """A preset's ``tuning:`` section (see emergence_bench.execution.tuning)."""

    seeds: list[int]
    grid: dict[str, list]
    rung: Rung = "middle"
    seed_parallel: int = 1
    widen: int = 2
    prune: bool = True  # stop a point's runs once the rule can no longer choose it (execution/pruning.py)
    task_seeds: list[int] | None = None  # the task instances it tunes on (None: the sweep's own)

    @classmethod
    def parse(cls, data: Any, where: str) -> Tuning:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}tuning must be a mapping (seeds, grid, rung, seed_parallel, widen, prune, "
                              f"task_seeds), got {data!r}")
        allowed = {"seeds", "grid", "rung", "seed_parallel", "widen", "prune", "task_seeds"}
        if unknown := sorted(set(data) - allowed):
            raise ConfigError(f"{where}unknown tuning key(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}")
        seeds, grid = data.get("seeds"), data.get("grid")
        if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
            raise ConfigError(f"{where}tuning.seeds must be a non-empty list of whole numbers, got {seeds!r}")
        if not isinstance(grid, dict) or not grid or not all(isinstance(v, list) and v for v in grid.values()):
            raise ConfigError(f"{where}tuning.grid must map dotted keys to non-empty lists, got {grid!r}")
        check_distinct(f"{where}tuning.seeds", seeds)
        task_seeds = data.get("task_seeds")
        if task_seeds is not None:
            if not isinstance(task_seeds, list) or not task_seeds or not all(
                    isinstance(s, int) and not isinstance(s, bool) for s in task_seeds):
                raise ConfigError(f"{where}tuning.task_seeds must be a non-empty list of whole numbers, "
                                  f"got {task_seeds!r}")
            check_distinct(f"{where}tuning.task_seeds", task_seeds)
        for key, values in grid.items():
            check_distinct(f"{where}tuning.grid.{key}", values)
        tuning = cls(seeds=seeds, grid={k: list(v) for k, v in grid.items()}, rung=data.get("rung", "middle"),
                     seed_parallel=data.get("seed_parallel", 1), widen=data.get("widen", 2),
                     prune=data.get("prune", True), task_seeds=task_seeds)
        if tuning.rung not in ("middle", "all"):
            raise ConfigError(f"{where}tuning.rung must be middle or all, got {tuning.rung!r}")
        if not isinstance(tuning.prune, bool):
            raise ConfigError(f"{where}tuning.prune must be true or false, got {tuning.prune!r}")
        for name in ("seed_parallel", "widen"):
            value = getattr(tuning, name)
            if not isinstance(value, int) or value < (1 if name == "seed_parallel" else 0):
                raise ConfigError(f"{where}tuning.{name} must be a whole number, got {value!r}")
        return tuning


def parse_tuned(data: Any, where: str) -> dict[str, dict[str, dict[str, Any]]]:
    """A preset's ``tuned:`` map, checked: mixer name -> group name -> {dotted key: value}."""
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(g, dict) and all(isinstance(v, dict) for v in g.values())
                                             for g in data.values()):
        raise ConfigError(f"{where}tuned must map mixer -> group -> {{dotted key: value}}, got {data!r}")
    return copy.deepcopy(data)


@dataclass
class Group:
    name: str
    base: dict = field(default_factory=dict)
    grid: dict[str, list] = field(default_factory=dict)
    mixers: dict[str, dict] = field(default_factory=dict)  # mixer name -> its keys in this group's runs


@dataclass
class Sweep:
    name: str
    base: dict
    grid: dict[str, list] = field(default_factory=dict)
    description: str = ""
    groups: list[Group] = field(default_factory=list)
    advertised: int | None = None  # the `runs:` count a preset promises
    seed_parallel: int = 1  # how a sweep file says to train it by default (the CLI flags override)
    batching: Batching = "auto"
    scale: float = 1.0  # multiplies every run's trainer.max_steps and trainer.eval_every
    ladder: str | None = None  # the frozen ladder's version, which shipped reference results name
    learning_speed: list[str] = field(default_factory=list)  # task families outside the ranking's success score
    tuning: Tuning | None = None  # how a mixer's values are chosen per group (execution/tuning.py)
    tuned: dict[str, dict[str, dict]] = field(default_factory=dict)  # mixer -> group -> {dotted key: value}

    def raw_runs(self) -> list[tuple[str, dict]]:
        """Every run as (group name, or "" without groups; raw config), at its mixer's tuned values."""
        runs = []
        for group in self.groups or [Group("")]:
            base, grid = merge(self.base, group.base), {**self.grid, **group.grid}
            for values in itertools.product(*grid.values()):
                config = copy.deepcopy(base)
                for key, value in zip(grid, values):
                    set_dotted(config, key, copy.deepcopy(value))
                for key, value in group.mixers.get(config.get("mixer", {}).get("name"), {}).items():
                    config["mixer"][key] = copy.deepcopy(value)
                if self.tuning is not None:
                    for key, value in self.tuned_values(config.get("mixer", {}).get("name"), group.name).items():
                        set_dotted(config, key, copy.deepcopy(value))
                if self.scale != 1.0:
                    self._rescale(config)
                runs.append((group.name, config))
        return runs

    def families(self) -> set[str]:
        """The task families its runs train, read before any tuning has chosen a value."""
        families: set[str] = set()
        for group in self.groups or [Group("")]:
            grid = {**self.grid, **group.grid}
            tasks = grid.get("task", [merge(self.base, group.base).get("task", {})])  # a grid of whole tasks, or one
            names = [task.get("name") if isinstance(task, dict) else None for task in tasks]
            families.update(str(name) for name in grid.get("task.name", names))
        return families

    def count(self) -> int:
        """How many runs the sweep expands to (known before any tuning has chosen their values)."""
        return sum(math.prod(len(v) for v in {**self.grid, **g.grid}.values()) for g in self.groups or [Group("")])

    def tuned_values(self, mixer: str | None, group: str) -> dict:
        """The tuned values of ``mixer`` in ``group``; ConfigError when it has none (tune it first)."""
        values = self.tuned.get(mixer or "", {}).get(group)
        if values is None:
            raise ConfigError(f"mixer {mixer!r} has no tuned values for group {group!r} of {self.name}: "
                              f"`emergence-bench sweep {self.name}` tunes it first")
        return values

    def untune(self, key: str) -> None:
        """Stop tuning ``key`` (the user set it for every run): drop it from the tuning grid and the
        tuned values; with nothing left to tune, the sweep is an untuned one."""
        if self.tuning is None or key not in self.tuning.grid:
            return
        del self.tuning.grid[key]
        for groups in self.tuned.values():
            for values in groups.values():
                values.pop(key, None)
        if not self.tuning.grid:
            self.tuning = None

    def _rescale(self, config: dict) -> None:
        trainer = config.setdefault("trainer", {})
        defaults = TrainerConfig()
        for key in ("max_steps", "eval_every"):
            trainer[key] = max(1, round(trainer.get(key, getattr(defaults, key)) * self.scale))

    def runs(self) -> list[tuple[str, RunConfig]]:
        """Every run resolved and checked (a bad grid point fails here, before any run)."""
        return [(group, planned.config) for group, planned in self.plans()]

    def plans(self) -> list[tuple[str, RunPlan]]:
        """Every run checked and sized (``emergence_bench.engine.run.plan``), by group."""
        from emergence_bench.engine.run import plan

        return [(group, plan(raw)) for group, raw in self.raw_runs()]

    def select(self, names: list[str]) -> None:
        """Keep only the named groups."""
        known = [g.name for g in self.groups]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"unknown group(s) {', '.join(unknown)} in sweep {self.name!r}; "
                              f"groups: {', '.join(known) or '(none)'}")
        self.groups = [g for g in self.groups if g.name in names]

    def choose_mixers(self, names: list[str]) -> None:
        """Train exactly the named mixers (``--mixers``): a mixer grid axis keeps its entries of these
        names, in this order, and a name it lacks joins with its defaults (a plugin joining a ranking);
        without a mixer axis, one is made. Run ids of the mixers kept are unchanged, so a finished
        sweep reruns nothing but the new mixers."""
        if not names or len(set(names)) != len(names):
            raise ConfigError(f"--mixers takes distinct mixer names, comma-separated, got {','.join(names)!r}")
        grids = [grid for grid in [self.grid] + [g.grid for g in self.groups] if "mixer" in grid]
        if not grids:
            grids = [self.grid]
            self.grid["mixer"] = [self.base.get("mixer") or {}]
        for grid in grids:
            known = {entry.get("name"): entry for entry in grid["mixer"] if isinstance(entry, dict)}
            grid["mixer"] = [copy.deepcopy(known.get(name, {"name": name})) for name in names]

    def override(self, overrides: dict) -> None:
        """Apply command-line ``--dotted.key value`` pairs: a grid axis is narrowed to the value(s)
        given, any other key is set on the base (and on each group's base that sets it)."""
        for key, value in overrides.items():
            self.untune(key)
            if key.startswith("mixer."):  # the user's --mixer.KEY wins over a group's keys for one mixer
                for group in self.groups:
                    for keys in group.mixers.values():
                        keys.pop(key.removeprefix("mixer."), None)
            narrowed = False
            for grid in [self.grid] + [g.grid for g in self.groups]:
                if key in grid:
                    grid[key] = value if isinstance(value, list) else [value]
                    check_distinct(f"--{key}", grid[key])
                    narrowed = True
            if not narrowed:
                set_dotted(self.base, key, value)
                for group in self.groups:
                    set_dotted(group.base, key, value)


def presets() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PRESETS_DIR.glob("*.yaml"))}


def _learning_speed(value: Any, path: Path) -> list[str]:
    """A sweep file's ``learning_speed``: task family names (a list; none by default)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{path}: learning_speed must be a list of task family names, got {value!r}")
    return list(value)


def _group_mixers(value: Any, where: str) -> dict[str, dict]:
    """A group's ``mixers``: mixer name -> {key: value} (none by default)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in value.items()):
        raise ConfigError(f"{where} must map a mixer name to its keys, as {{transformer: {{n_heads: 8}}}}, "
                          f"got {value!r}")
    if named := sorted(k for keys in value.values() for k in keys if k == "name"):
        raise ConfigError(f"{where} may not set a mixer's {named[0]} (it names which mixer the keys are for)")
    return copy.deepcopy(value)


def load_sweep(preset_or_file: str) -> Sweep:
    """A preset name (see ``presets()``) or the path of a sweep YAML file."""
    path = Path(preset_or_file)
    if not path.is_file():
        known = presets()
        if preset_or_file not in known:
            close = difflib.get_close_matches(preset_or_file, list(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"no sweep file or preset named {preset_or_file!r}.{hint} "
                              f"Presets: {', '.join(known)}")
        path = known[preset_or_file]
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping (name, base, grid, groups), got {type(data).__name__}")
    if data.get("base") is not None and not isinstance(data["base"], dict):
        raise ConfigError(f"base in {path} must be a run config (a mapping), got {data['base']!r}")
    allowed = {"name", "description", "runs", "base", "grid", "groups", "seed_parallel", "batching", "ladder",
               "learning_speed", "tuning", "tuned"}
    for key in data:
        if key not in allowed:
            raise ConfigError(f"unknown sweep key {key!r} in {path}; valid keys: {', '.join(sorted(allowed))}")
    groups = []
    for i, group in enumerate(_group_list(data.get("groups"), path)):
        extra = set(group) - {"name", "base", "grid", "mixers"}
        if "name" not in group or extra:
            raise ConfigError(f"groups[{i}] in {path} needs a name and may have base, grid and mixers; "
                              f"got keys {sorted(group)}")
        groups.append(Group(group["name"], group.get("base") or {}, _grid(group.get("grid"), path),
                            _group_mixers(group.get("mixers"), f"{path}: groups[{i}].mixers")))
    sweep = Sweep(name=data.get("name", path.stem), base=data.get("base") or {}, grid=_grid(data.get("grid"), path),
                  description=data.get("description", ""), groups=groups, advertised=data.get("runs"),
                  seed_parallel=data.get("seed_parallel", 1), batching=data.get("batching", "auto"),
                  ladder=data.get("ladder"), learning_speed=_learning_speed(data.get("learning_speed"), path),
                  tuned=parse_tuned(data.get("tuned"), f"{path}: "),
                  tuning=Tuning.parse(data["tuning"], f"{path}: ") if data.get("tuning") is not None else None)
    if not isinstance(sweep.seed_parallel, int) or sweep.seed_parallel < 1:
        raise ConfigError(f"{path}: seed_parallel must be a whole number ≥ 1, got {sweep.seed_parallel!r}")
    check_choices(sweep, f"{path}: ")
    if sweep.learning_speed:
        families = sweep.families()
        unknown = [f for f in sweep.learning_speed if f not in families]
        if unknown:
            raise ConfigError(f"{path}: learning_speed names {unknown}, not a task family of this sweep "
                              f"(its families: {', '.join(sorted(str(f) for f in families))})")
    if sweep.tuning is not None:
        _check_tuned(sweep, path)
    if sweep.advertised is not None and sweep.count() != sweep.advertised:
        raise ConfigError(f"{path} says runs: {sweep.advertised} but expands to {sweep.count()}")
    return sweep


def _check_tuned(sweep: Sweep, path: Path) -> None:
    """A tuned map that names only the sweep's groups and the tuning grid's keys."""
    groups = {g.name for g in sweep.groups}
    keys = set(sweep.tuning.grid) if sweep.tuning else set()
    if not groups:
        raise ConfigError(f"{path}: tuning needs groups (each a ladder with one task.* grid axis)")
    for mixer, by_group in sweep.tuned.items():
        for group, values in by_group.items():
            if group not in groups:
                raise ConfigError(f"{path}: tuned.{mixer}.{group}: no group {group!r}; "
                                  f"groups: {', '.join(sorted(groups))}")
            if set(values) != keys:
                raise ConfigError(f"{path}: tuned.{mixer}.{group} must set exactly the tuning grid's keys "
                                  f"({', '.join(sorted(keys))}), got {', '.join(sorted(values)) or 'none'}")


def _group_list(groups: Any, path: Path) -> list[dict]:
    """``groups`` as a list of {name, base, grid}: the documented list form, or a mapping from each
    group's name to its {base, grid} (the name is its key)."""
    if isinstance(groups, dict):
        listed = []
        for name, body in groups.items():
            if body is not None and not isinstance(body, dict):
                raise ConfigError(f"groups.{name} in {path} must be a mapping with base and/or grid, got {body!r}")
            listed.append({"name": name, **(body or {})})
        return listed
    if groups is not None and not isinstance(groups, list):
        raise ConfigError(f"groups in {path} must be a list of {{name, base, grid}} (or a mapping from name to "
                          f"{{base, grid}}), got {type(groups).__name__}")
    for i, group in enumerate(groups or []):
        if not isinstance(group, dict):
            raise ConfigError(f"groups[{i}] in {path} must be a mapping with a name, got {group!r}")
    return groups or []


def _grid(grid: Any, path: Path) -> dict[str, list]:
    if grid is not None and not isinstance(grid, dict):
        raise ConfigError(f"grid in {path} must be a mapping from dotted keys to lists of values, got {grid!r}")
    grid = dict(grid or {})
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key} in {path} must be a non-empty list, got {values!r}")
        check_distinct(f"grid.{key} in {path}", values)
    return grid


def check_distinct(where: str, values: list) -> None:
    """ConfigError naming the first value of ``values`` given twice: a repeated grid value would
    count one run twice (it has one run id)."""
    seen = set()
    for value in values:
        canonical = json.dumps(value, sort_keys=True, default=str)
        if canonical in seen:
            raise ConfigError(f"{where}: the value {value!r} is given twice (one run cannot be counted twice)")
        seen.add(canonical)
