"""docs/plugins.md's task walk-through ("Write a task plugin"), run as written.

The plugin's files are read from the page: each fenced block whose paragraph before it starts or ends
with "`path`:" is that file. The package is installed with pip into a folder put on PYTHONPATH (where
the page's `pip install -e` puts it in `.venv`), and the page's `.venv/bin/emergence-bench` commands
run, in order, in a scratch folder standing for the suite's checkout, with this environment's
command; their output is checked against the blocks the page shows after them.

The fast test checks the task itself (the registry's contract, the numbers the page states); the
commands start the suite four times (15-25 s each on 2 cores), so they are marked slow.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
import walkthrough_page

from emergence_bench import registry
from emergence_bench.registry import PluginRegistry

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "plugins.md"
HEADING = "## Write a task plugin"
BIN = Path(sys.executable).parent  # this environment's `.venv/bin`

# What the core reads from a task (emergence_bench.engine, the callbacks, the recorder): more than
# registry.TaskContract checks on the class, so it is checked on an instance here.
READ_BY_THE_CORE = (
    "vocab_size", "seq_len", "batch_size", "task_seed", "generate", "batch", "configure_streams",
    "train_dataloader", "val_dataloader", "model_inputs", "loss_mask", "output_cell", "num_cells",
    "ground_truth_attention", "ground_truth_patterns", "pattern", "probe_keys", "bias_defaults",
    "chance_loss", "floor_loss", "max_accuracy", "shortcut_loss",
)


def section() -> str:
    return walkthrough_page.section(PAGE, HEADING)


def blocks() -> list[tuple[str, str, str]]:
    """(language, body, the paragraph before it) of each fenced block of the section, in order."""
    return walkthrough_page.blocks(section())


def files() -> dict[str, str]:
    """{path: content} of the blocks the page names as files."""
    named = {}
    for _, body, before in blocks():
        match = re.match(r"`([\w./-]+)`:", before) or re.search(r"`([\w./-]+)`:$", before)
        if match:
            named[match.group(1)] = body
    return named


def package() -> tuple[str, list[str]]:
    """The package's folder and its files, from the page's tree (the first plain block)."""
    tree = next(body for language, body, _ in blocks() if not language).split("\n")
    return tree[0].rstrip("/"), [line.split()[0] for line in tree[1:] if line.strip()]


def commands() -> list[tuple[str, str | None]]:
    """(command, what the page shows it prints, or None) of the section's `sh` blocks, in order: a
    plain block right after a `sh` block is the output of its last command."""
    found: list[tuple[str, str | None]] = []
    listed = blocks()
    for i, (language, body, _) in enumerate(listed):
        if language != "sh":
            continue
        lines = [line.split(" #")[0].strip() for line in body.split("\n") if line.strip()]
        shown = listed[i + 1][1] if i + 1 < len(listed) and not listed[i + 1][0] else None
        found += [(line, shown if n == len(lines) - 1 else None) for n, line in enumerate(lines)]
    return found


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The page's package written out and installed with pip (no dependencies, no index) into a
    folder to put on PYTHONPATH; returns that folder."""
    root = tmp_path_factory.mktemp("task_walkthrough")
    folder, tree = package()
    written = files()
    assert sorted(tree) == sorted(p for p in written if not p.endswith(".yaml")), "the tree lists the files shown"
    for path in tree:
        (root / folder / path).parent.mkdir(parents=True, exist_ok=True)
        (root / folder / path).write_text(written[path])
    site = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
           "--no-compile", "--no-index", "--target", str(site), str(root / folder)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return site


@pytest.fixture
def plugin(installed, monkeypatch):
    """The page's task class, loaded through its entry point; its modules are dropped afterwards so
    nothing else in the session sees it."""
    monkeypatch.syspath_prepend(str(installed))
    (point,) = [ep for ep in entry_points(group="emergence_bench.tasks") if ep.name == "pair_sum"]
    try:
        yield point.load()
    finally:
        for name in [m for m in sys.modules if m == "pair_sum" or m.startswith("pair_sum.")]:
            del sys.modules[name]


def test_the_walkthrough_task_meets_the_contract_and_has_the_pages_numbers(plugin, installed, monkeypatch):
    from emergence_bench.callbacks.plateau import Plateau
    from emergence_bench.tasks.base import SyntheticTask

    text = section()
    assert registry.tasks.unmet(plugin) is None and issubclass(plugin, SyntheticTask)
    # Registered from its entry point by a plugin registry, as the suite's own does on first use.
    tasks = PluginRegistry("task", registry.TaskContract, "emergence_bench.tasks", "emergence_bench.tasks")
    assert tasks.get("pair_sum") is plugin and "pair_sum" not in tasks.broken
    assert list(registry.constructor_parameters(plugin, {"self"})) == ["base", "width", "blocks", "task_seed",
                                                                     "batch_size"]

    task = plugin()
    task.configure_streams(data_seed=0, eval_batches=1)
    missing = [name for name in READ_BY_THE_CORE if not hasattr(task, name)]
    assert not missing, f"the core reads {missing}"
    tokens = task.batch("train", 0)
    assert tokens.shape == (64, task.seq_len + 1) and task.model_inputs(tokens).shape == (64, task.seq_len)
    assert task.seq_len == 23 and task.vocab_size == 8 and 0 <= tokens.min() and tokens.max() < 8

    # The pattern: each `=` row marks its block's digits i, j = 0, 2 (task seed 0), and predicts their sum.
    assert "seed 0 draws i, j = 0, 2" in text and task.pair.tolist() == [0, 2]
    rows = task.loss_mask.nonzero()[:, 0]
    assert rows.tolist() == [4, 10, 16, 22] and task.output_cell[rows].tolist() == [0, 1, 2, 3]
    truth = task.ground_truth_attention()
    assert [row.nonzero()[:, 0].tolist() for row in truth[rows]] == [[0, 2], [6, 8], [12, 14], [18, 20]]
    assert truth.sum() == 8 and (tokens[:, rows] == 7).all()  # the separator
    assert torch.equal(tokens[:, rows + 1], tokens[:, rows - 4] + tokens[:, rows - 2])

    # The numbers the page gives, and the thresholds it says they set.
    chance, shortcut = task.chance_loss, task.shortcut_loss
    assert chance == pytest.approx(math.log(8)) and (task.floor_loss, task.max_accuracy) == (0.0, 1.0)
    sums = [a + b for a in range(4) for b in range(4)]
    assert shortcut == pytest.approx(-sum(sums.count(s) / 16 * math.log(sums.count(s) / 16) for s in set(sums)))
    with_shortcut = Plateau(task).threshold

    class NoShortcut(plugin):  # the same task without its shortcut
        shortcut_loss = None

    without = Plateau(NoShortcut()).threshold
    for number in (chance, shortcut, with_shortcut, without):
        assert f"{number:.3f}" in text, number
    assert without > shortcut > with_shortcut

    # Invalid parameters name the parameter, as the page says.
    for kwargs, message in (({"base": 1}, "base must be in [2, inf], got 1"),
                            ({"width": 1}, "width must be in [2, inf], got 1"),
                            ({"blocks": 0}, "blocks must be in [1, inf], got 0")):
        with pytest.raises(ValueError, match=re.escape(message)):
            plugin(**kwargs)
    assert "error: base must be in [2, inf], got 1" in text


def table(output: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``output``, as {column: cell}."""
    lines = [line for line in output.split("\n") if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


@pytest.mark.slow
def test_the_walkthrough_commands_print_what_the_page_shows(installed, tmp_path):
    folder, _ = package()
    suite = tmp_path / "emergence-bench"  # the page's commands run in the suite's checkout
    suite.mkdir()
    for path, body in files().items():
        if path.endswith(".yaml"):
            (suite / path).write_text(body)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(installed), *filter(None, [os.environ.get("PYTHONPATH")])])}
    ran = []
    for command, shown in commands():
        words = shlex.split(command)
        if words[0] == ".venv/bin/pip":  # the install: the fixture's
            assert words[1:] == ["install", "-e", f"../{folder}"], command
            continue
        assert words[0] == ".venv/bin/emergence-bench", command
        done = subprocess.run([str(BIN / "emergence-bench"), *words[1:]], cwd=suite, env=env,
                              capture_output=True, text=True, timeout=600)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{command}\n{output}"
        ran.append(words[1])
        if words[1] == "list":
            assert shown and all(line in output.split("\n") for line in shown.strip("\n").split("\n")), output
        elif words[1] == "run":
            assert shown and "status ok" in shown and "status ok" in output.split("\n"), output
            for threshold in re.findall(r"\((?:accuracy|loss) [^)]*\)", shown):
                assert threshold in output, (threshold, output)
        elif words[1] == "sweep":
            assert re.search(r"finished: \d+ ok, 0 diverged, 0 failed", output), output
        elif words[1] == "leaderboard":
            assert shown, "the page shows the leaderboard"
            rows = {row["task"]: row for row in table(output)}
            for row in table(shown):  # what does not depend on the training itself
                for column in ("task", "mixer", "setting", "intervention", "seeds", "shortcut loss"):
                    assert rows[row["task"]][column] == row[column], (column, output)
    assert ran == ["list", "run", "sweep", "leaderboard"]


@pytest.mark.slow
def test_the_contract_tests_check_the_installed_plugin(installed):
    """The page says `pytest tests/test_task_contract.py -k pair_sum` checks the plugin: it does."""
    assert "tests/test_task_contract.py -k pair_sum" in section()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(installed)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_task_contract.py", "-k", "pair_sum"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and re.search(r"\d+ passed", done.stdout), done.stdout + done.stderr
