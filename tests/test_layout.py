"""The layout is the architecture: one namespace, no import cycles, mixers and tasks free of callbacks.

The import graph is read from the source with ``ast`` (module-level and function-local imports
alike: a lazy import only hides a cycle until the day someone hoists it), so the test needs no
imports of the package and names the offending files.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "emergence_bench"


def package_dirs() -> dict[str, Path]:
    """Package name -> its folder, from pyproject's setuptools package-dir mapping."""
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {name: REPO / folder for name, folder in mapping.items()}


def modules() -> dict[str, Path]:
    """Every module of the installed namespace: dotted name -> source file (a package is its __init__)."""
    dirs = package_dirs()
    found = {}
    for package, folder in dirs.items():
        nested = [d for d in dirs.values() if d != folder and d.is_relative_to(folder)]  # their own packages
        for path in sorted(folder.rglob("*.py")):
            if any(path.is_relative_to(d) for d in nested):
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _under_type_checking(node: ast.AST, parents: dict) -> bool:
    """Whether ``node`` sits under ``if TYPE_CHECKING:`` (an import that never runs)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imported(name: str, path: Path, known: set[str], type_checking: bool = False) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere in its file, plus the
    packages above them whose ``__init__`` those imports run (those above ``name`` itself already ran).
    ``type_checking``: the imports under ``if TYPE_CHECKING:`` count too."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if not type_checking and _under_type_checking(node, parents):
            continue  # (an import under `if TYPE_CHECKING:` never runs)
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        if node.level:  # relative: `from . import x`, `from ..results import y`
            base = name.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module
        for alias in node.names:  # `from pkg import module` imports pkg.module
            targets.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source)
    own_ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    if is_package:
        own_ancestors.add(name)
    edges = set()
    for target in targets:
        if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
            continue
        parts = target.split(".")
        while ".".join(parts) not in known:  # `import pkg.module.attribute` style: the module
            parts.pop()
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ first
            module = ".".join(parts[:i])
            if module in known and module not in own_ancestors and module != name:
                edges.add(module)
    return edges


def builtins_of(package: Path) -> tuple[str, ...]:
    """The module names a package's ``__init__`` lists in ``BUILTINS`` (read, not imported)."""
    for node in ast.parse(package.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "BUILTINS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{package} declares no BUILTINS")


def loaded(name: str, path: Path, found: dict[str, Path]) -> set[str]:
    """The modules ``name`` loads by name (``importlib``), which no import statement shows: each
    registry it makes with ``builtins="package"`` imports that package, its catalog if it has one,
    and the modules its ``BUILTINS`` names (``emergence_bench.registry``)."""
    loads = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.keyword) and node.arg == "builtins"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "builtins":
            continue  # passed on by a subclass's constructor: its caller declares the load
        assert isinstance(node.value, ast.Constant) and node.value.value in found, (
            f"{path}:{node.value.lineno}: builtins= must name a package of the namespace as a literal, for this "
            "test to see the load")
        package = node.value.value
        loads |= {package} | {f"{package}.{module}" for module in builtins_of(found[package])}
        loads |= {f"{package}.catalog"} & set(found)
    return loads - {name}


def import_graph(type_checking: bool = False, loads: bool = False) -> dict[str, set[str]]:
    """Module -> the modules it imports; with ``loads``, the modules it loads by name too (``loaded``).
    Loads are left out of the cycle and floor tests: a built-in registers itself with the registry
    that loads it (a cycle by design, closed only after the registry's module has run), and a load by
    name can never be hoisted into a top-level import. The map test takes them."""
    found = modules()
    return {name: imported(name, path, set(found), type_checking) | (loaded(name, path, found) if loads else set())
            for name, path in found.items()}


def top_level(module: str) -> str:
    """The folder or root module of the namespace that ``module`` belongs to: emergence_bench.engine.run
    -> engine, emergence_bench.config -> config (the namespace itself: "")."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with each module replaced by its ``top_level`` (edges within one folder dropped)."""
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        folders.setdefault(top_level(module), set()).update(top_level(t) for t in targets)
    return {folder: targets - {folder, ""} for folder, targets in folders.items() if folder}


def folder_map() -> list[set[str]]:
    """docs/design.md's folder map, top line first: each line's names (folders and root modules)."""
    text = (REPO / "docs" / "design.md").read_text()
    block = text.split("## The layout is the architecture", 1)[1].split("```", 2)[1]
    layers = []
    for line in block.splitlines():
        if line.strip() and not line.startswith(" "):  # a continuation line is indented
            names = line.split("  ")[0]  # the names end where the description's column starts
            layers.append({name.strip().rstrip("/") for name in names.split(",")})
    return layers


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None (depth-first search with colours)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    """The parser itself: a function-local import and `from . import x` are edges; a cycle is found."""
    (tmp_path / "a.py").write_text("def f():\n    from emergence_bench import b\n")
    (tmp_path / "b.py").write_text("from . import a\n")
    known = {"emergence_bench", "emergence_bench.a", "emergence_bench.b"}
    graph = {"emergence_bench.a": imported("emergence_bench.a", tmp_path / "a.py", known),
             "emergence_bench.b": imported("emergence_bench.b", tmp_path / "b.py", known)}
    assert graph == {"emergence_bench.a": {"emergence_bench.b"}, "emergence_bench.b": {"emergence_bench.a"}}
    assert find_cycle(graph) == ["emergence_bench.a", "emergence_bench.b", "emergence_bench.a"]


def test_every_folder_is_in_the_graph():
    found = modules()
    for name in ("emergence_bench.engine.run", "emergence_bench.machine.devices", "emergence_bench.execution.sweep",
                 "emergence_bench.analysis.pythia", "emergence_bench.perf.speed",
                 "emergence_bench.tasks.linear_map", "emergence_bench.mixers.attention",
                 "emergence_bench.callbacks.checkpoints"):
        assert name in found, name


def test_every_package_folder_is_shipped():
    """A folder with an ``__init__.py`` that pyproject's ``packages`` leaves out works in the editable
    checkout and is missing from a built wheel (as ``reporting.figures`` once was)."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert found - listed == set(), f"add to pyproject's packages: {sorted(found - listed)}"
    assert listed - found == set(), f"listed but not a package folder: {sorted(listed - found)}"


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycles_between_folders():
    """Modules can be acyclic while their folders are not (callbacks -> forecast -> reporting ->
    execution -> callbacks once was): folders and root modules as nodes, no cycle either."""
    cycle = find_cycle(package_graph(import_graph()))
    assert cycle is None, "import cycle between folders: " + " -> ".join(cycle)


def test_the_folder_graph_finds_a_cycle_the_module_graph_does_not():
    graph = {"emergence_bench.a.x": {"emergence_bench.b.y"}, "emergence_bench.b.z": {"emergence_bench.a.w"},
             "emergence_bench.a.w": set(), "emergence_bench.b.y": set()}
    assert find_cycle(graph) is None
    assert find_cycle(package_graph(graph)) == ["a", "b", "a"]


# The one load up the map, on purpose: registry.callbacks sits beside config, which reads the
# callbacks' keys through it (callbacks/catalog.py, Lightning-free), and it loads the callbacks
# themselves by name when the engine asks for one.
UPWARD_LOADS = {("registry", "callbacks")}


def test_every_import_goes_down_the_folder_map():
    """docs/design.md's map is the dependency order: an import (under TYPE_CHECKING too) or a load by
    name reaches only its own line or those below, and every folder and root module is on the map."""
    layers = folder_map()
    level = {name: i for i, names in enumerate(layers) for name in names}
    graph = import_graph(type_checking=True, loads=True)
    unplaced = sorted({top_level(m) for m in graph} - set(level) - {""})
    assert not unplaced, f"put these on docs/design.md's folder map: {unplaced}"
    upward = [f"{module} -> {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
              if top_level(module) and top_level(target) and level[top_level(target)] < level[top_level(module)]
              and (top_level(module), top_level(target)) not in UPWARD_LOADS]
    assert not upward, "imports up the folder map (declare a Protocol below instead):\n" + "\n".join(upward)


def test_the_registries_loads_are_in_the_graph():
    """The loads by name are edges (issue 54: the measurements once loaded every callback through the
    registry, unseen): the registry's of the components, the measurements' of their declarations, and
    nothing loads the callbacks but the registry."""
    graph = import_graph(loads=True)
    plain = import_graph()
    loads = {module: targets - plain[module] for module, targets in graph.items() if targets - plain[module]}
    assert set(loads) == {f"{PACKAGE}.registry", f"{PACKAGE}.measurements"}, sorted(loads)
    for kind in ("mixers", "tasks", "callbacks"):
        assert {f"{PACKAGE}.{kind}", f"{PACKAGE}.{kind}.{builtins_of(modules()[f'{PACKAGE}.{kind}'])[0]}"} <= loads[
            f"{PACKAGE}.registry"], kind
    assert all(top_level(t) == "measurements" for t in loads[f"{PACKAGE}.measurements"])


ROOT = {"__init__", "__main__", "cli", "config", "registry"}  # the entry points, the config and the registry


def test_the_package_root_holds_only_the_entry_points_the_config_and_the_registry():
    """Every other module of benchmark/ lives in its layer's folder (issue 54: the root once held 15
    modules from five lines of the map). The root is not one layer: ``cli`` and ``__main__`` sit on the
    map's top line and import the commands, ``config`` and ``registry`` on its bottom one, imported by
    nearly every module, so the map and the cycle tests take each root module as its own node."""
    found = {path.stem for path in package_dirs()[PACKAGE].glob("*.py")}
    assert found <= ROOT, f"move into a layer's folder (docs/design.md's map): {sorted(found - ROOT)}"
    layers = folder_map()
    assert {"cli", "__main__"} <= layers[0] and {"config", "registry"} <= layers[-1]


def test_the_folder_map_is_read_as_written():
    layers = folder_map()
    assert layers[0] == {"cli", "__main__", "commands"} and layers[-1] == {"config", "registry", "tasks", "mixers"}
    assert {"engine"} in layers and layers.index({"engine"}) < layers.index({"callbacks"})


def test_the_step_imports_none_of_the_modules_it_trains():
    """engine/training.py trains any ``Trainable``: neither EmergenceModule's module nor the stack's,
    not even for a type."""
    found = modules()
    name = f"{PACKAGE}.engine.training"
    targets = imported(name, found[name], set(found), type_checking=True)
    assert not targets & {f"{PACKAGE}.engine.module", f"{PACKAGE}.engine.seed_stack"}, targets


FLOORS = 16  # issue 34: no more floors than the house had when it was drawn


def tallest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports [a, b, ..., z] in ``graph`` (acyclic): a house's floors. Importing a
    module runs its package's ``__init__`` first, which ``imported`` counts as an edge."""
    height: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in height:
            below = [chain(nxt) for nxt in sorted(graph.get(node, ())) if nxt != node]
            height[node] = [node] + max(below, key=len, default=[])
        return height[node]

    return max((chain(node) for node in sorted(graph)), key=len)


def test_the_tallest_chain_is_measured():
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": set(), "d": {"c"}}
    assert tallest_chain(graph) == ["a", "b", "d", "c"]


def test_the_house_has_at_most_16_floors():
    """What keeps it low: the ``__init__`` of mixers, tasks and callbacks imports none of their modules
    (the registries import the built-ins that ``BUILTINS`` names when first read), so importing
    ``mixers.base`` or ``callbacks.contract`` does not pull every mixer or callback under the module
    that needs a type."""
    chain = tallest_chain(import_graph())
    assert len(chain) <= FLOORS, f"{len(chain)} floors: " + " -> ".join(chain)


@pytest.mark.parametrize("module, package", [("emergence_bench.mixers.base", "emergence_bench.mixers"),
                                             ("emergence_bench.tasks.base", "emergence_bench.tasks"),
                                             ("emergence_bench.callbacks.contract", "emergence_bench.callbacks")])
def test_a_contract_module_loads_none_of_the_builtins_until_the_registry_is_read(module, package, tmp_path):
    kind = package.rsplit(".", 1)[1]
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        f"package = sys.modules[{package!r}]\n"
        "loaded = [m for m in package.BUILTINS if f'{package.__name__}.{m}' in sys.modules]\n"
        "print('before', loaded)\n"
        f"from emergence_bench import registry\n"
        f"registry.{kind}.names()\n"
        "print('after', all(f'{package.__name__}.{m}' in sys.modules for m in package.BUILTINS))\n"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["before []", "after True"]


def test_the_measurements_order_is_the_builtins_whichever_module_is_imported_first(tmp_path):
    code = (
        "import emergence_bench.measurements.recorded\n"  # a late one first, before any registry read
        "from emergence_bench.measurements import measurements\n"
        "print(' '.join(m.name for m in measurements()))\n"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["emergence", "plateau", "first_drop", "attention_probe", "influence_probe",
                                     "abruptness", "budget", "final_loss", "shortcut", "cells_learned", "speed",
                                     "forecast_stop"]


def import_path(graph: dict[str, set[str]], start: str, goal) -> list[str] | None:
    """A chain of imports [start, ..., m] with ``goal(m)`` true, or None (breadth-first)."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                if goal(nxt):
                    return paths[nxt]
                queue.append(nxt)
    return None


@pytest.mark.parametrize("package", ["emergence_bench.mixers", "emergence_bench.tasks"])
def test_mixers_and_tasks_do_not_import_callbacks(package):
    """Not directly, nor through another module: a mixer or task must load without the callbacks."""
    graph = import_graph()
    callbacks = "emergence_bench.callbacks"
    offenders = {}
    for name in graph:
        if name == package or name.startswith(package + "."):
            path = import_path(graph, name, lambda m: m == callbacks or m.startswith(callbacks + "."))
            if path:
                offenders[name] = " -> ".join(path)
    assert not offenders, offenders


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` run by this venv's python outside the checkout, so only the installed package is seen."""
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}  # no PYTHONPATH pointing into the checkout
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_only_the_namespace_is_importable(tmp_path):
    code = (
        "import importlib\n"
        "for name in ('tasks', 'mixers', 'callbacks', 'benchmark'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise SystemExit(f'top-level package {name!r} is importable')\n"
        "import emergence_bench.mixers, emergence_bench.tasks, emergence_bench.callbacks\n"
        "print('ok')\n"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_python_dash_m_runs_the_command(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", PACKAGE, "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage: emergence-bench" in result.stdout and "sweep" in result.stdout


def test_a_result_rows_sections_are_read_through_section():
    """``section(row, name)`` is the one reader of a row's sections: a new ``row.get("metrics") or {}``
    elsewhere fails here, naming the file and line."""
    import re
    from typing import get_args

    from emergence_bench.measurements import measurements
    from emergence_bench.results.row import SectionName

    # The row's own sections and those the measurements declare (the influence probe's, a plugin's).
    names = "|".join(sorted(set(get_args(SectionName)) | {m.section for m in measurements()}))
    # (a config's callbacks section shares two names with row sections: ``callbacks.get("emergence")``)
    bypass = re.compile(rf"""(?<!callbacks)\.get\(\s*["']({names})["']\s*\)\s*or\s*\{{\}}""")
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for module, path in modules().items() if module != f"{PACKAGE}.results.row"
             for number, line in enumerate(path.read_text().splitlines(), 1) if bypass.search(line)]
    assert not found, "read these sections with emergence_bench.results.row.section:\n" + "\n".join(found)


def test_a_module_over_400_lines_says_why():
    """One idea per file: a module of benchmark/ over 400 lines gives its reason in its docstring."""
    long = []
    for module, path in modules().items():
        if not module.startswith(f"{PACKAGE}.") or module.split(".")[1] in ("mixers", "tasks", "callbacks"):
            continue
        text = path.read_text()
        if len(text.splitlines()) > 400 and "Over 400 lines" not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{path.relative_to(REPO)}: {len(text.splitlines())} lines")
    assert not long, "split these, or say in the docstring why not (\"Over 400 lines, ...\"):\n" + "\n".join(long)


def test_no_import_follows_a_type_checking_block():
    """A module's imports come before its ``if TYPE_CHECKING:`` block (an import after one reads as if
    it were only for types; isort cannot move it across the block)."""
    stray = []
    for module, path in modules().items():
        body = ast.parse(path.read_text(), str(path)).body
        checking = [i for i, node in enumerate(body)
                    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)]
        if checking:
            stray += [f"{path.relative_to(REPO)}:{node.lineno}" for node in body[checking[0] + 1:]
                      if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not stray, "move these imports above the TYPE_CHECKING block:\n" + "\n".join(stray)
