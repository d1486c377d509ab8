"""The CLI answers before it loads the numerical stack. `--help` and every command's argument errors
(over every command and subcommand in the registry) import no pandas, torch or Lightning; `list` and a
config whose keys are wrong (a fixed section's, or a task's, mixer's or callback's, read from its
catalog) neither torch nor Lightning; and the readers, `leaderboard`, `rank` and `claims`, on a real
folder of rows, neither torch nor Lightning. Speed itself is measured, not tested
(benchmark/perf/cli_latency.py); what is tested is what each answer imports."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from emergence_bench.cli import parser
from emergence_bench.commands import COMMANDS

PROBE = """
import json, sys
from emergence_bench.cli import main
try:
    status = main({argv!r})
except SystemExit as exit:  # --help
    status = exit.code
print(json.dumps({{"status": status, "torch": "torch" in sys.modules, "lightning": "lightning" in sys.modules}}))
"""


def answer(argv: list[str], tmp_path) -> dict:
    """What ``emergence-bench *argv`` returned and imported, in a fresh interpreter."""
    result = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    return json.loads(result.stdout.strip().splitlines()[-1])


HEAVY = ("pandas", "torch", "lightning")
SWEEP = """
import contextlib, io, json, sys
from emergence_bench.cli import main
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exit:  # --help, and argparse's errors
            status = exit.code
    print(json.dumps({"argv": argv, "status": status, "imports": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,)


def answers(argvs: list[list[str]], cwd: Path) -> list[dict]:
    """What each of ``argvs`` returned, and which of HEAVY were imported once it had answered, one
    after the other in one fresh interpreter: the first answer that imports one is the one to blame."""
    result = subprocess.run([sys.executable, "-c", SWEEP, json.dumps(argvs)], cwd=cwd, capture_output=True, text=True,
                            timeout=600, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def commands(p: argparse.ArgumentParser,
             prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command and subcommand of the parser, by its words (``("analyze", "patch")``)."""
    found = {}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[(*prefix, name)] = sub
                found.update(commands(sub, (*prefix, name)))
    return found


def argparse_errors(words: tuple[str, ...], p: argparse.ArgumentParser) -> list[list[str]]:
    """What argparse refuses of one command: a flag it does not know, its required arguments left
    out, and a value that an option's type or choices refuse (a plain string's type refuses none)."""
    errors = [[*words, "--no-such-flag"]]
    if any(a.required for a in p._actions if not a.option_strings):
        errors.append(list(words))
    errors += [[*words, a.option_strings[-1], "not-a-value"] for a in p._actions
               if a.option_strings and a.nargs != 0 and (a.choices or a.type not in (None, str, Path))]
    return errors


# Each command's named things that do not exist (a folder, a file, a name), refused before anything
# heavy loads. (`analyze pythia --model` on a missing folder is issue 55's: it is not refused yet.)
MISSING = {
    "list": [],  # it names nothing
    "run": [["run", "--config", "missing.yaml"]],
    "sweep": [["sweep", "no_such_preset"]],
    "leaderboard": [["leaderboard", "missing"]],
    "rank": [["rank", "missing"], ["rank", "missing", "--against", "missing"]],
    "report": [["report", "missing"]],
    "claims": [["claims", "missing"], ["claims", ".", "--claim", "no_such_claim"]],
    "analyze": [["analyze", "emergence", "missing"], ["analyze", "patch", "missing", "--old", "1", "--new", "2"],
                ["analyze", "abruptness", "missing"], ["analyze", "calibration", "missing"],
                ["analyze", "ablation", "missing", "--control", "a", "--treatment", "b"]],
    "lm-family": [["lm-family", "analyze", "missing"]],
    "forecast": [["forecast", "missing"]],
    "speed": [["speed", "--mixers", "no_such_mixer"]],
    "check-mixer": [["check-mixer", "no_such_mixer"]],
}


def test_every_commands_help_imports_no_pandas_torch_or_lightning(tmp_path):
    argvs = [["--help"]] + [[*words, "--help"] for words in commands(parser())]
    for said in answers(argvs, tmp_path):
        assert said["status"] == 0 and not said["imports"], said


def test_every_commands_argument_errors_import_no_pandas_torch_or_lightning(tmp_path):
    """Generated over every command and subcommand in the registry (issue 54: `--help` once imported
    pandas, and `check-mixer` with an unknown name torch and Lightning before it said so)."""
    assert set(MISSING) == set(COMMANDS), "say what each command names that may not exist"
    argvs = [error for words, p in commands(parser()).items() for error in argparse_errors(words, p)]
    argvs += [argv for cases in MISSING.values() for argv in cases]
    said = answers(argvs, tmp_path)
    assert len(said) == len(argvs) > 80
    for one in said:
        assert one["status"] == 2 and not one["imports"], one


@pytest.fixture(scope="module")
def real_rows(tmp_path_factory) -> Path:
    """A real folder of rows: the linear-map runs of docs/experiments/rows/abruptness-rule.tar.gz, as a
    results folder (for `leaderboard` and `rank`), and as the `emergence` group of a claims sweep,
    numbered as its confirmation seeds and task instances (for `claims`)."""
    root = tmp_path_factory.mktemp("rows")
    archive = Path(__file__).parents[1] / "docs" / "experiments" / "rows" / "abruptness-rule.tar.gz"
    with tarfile.open(archive) as tar:
        rows = sorted((m.name, json.load(io.BytesIO(tar.extractfile(m).read()))) for m in tar.getmembers()
                      if m.name.startswith("./linear-map/") and m.name.endswith("/result.json"))
    for i, (_, row) in enumerate(rows):
        (root / "linear-map" / row["run_id"]).mkdir(parents=True)
        (root / "linear-map" / row["run_id"] / "result.json").write_text(json.dumps(row))
        row["seed"] = row["config"]["seed"] = i % 8  # (claims read the confirmation seeds only)
        row["config"]["task"]["task_seed"] = i // 8
        (root / "claims" / "emergence" / row["run_id"]).mkdir(parents=True)
        (root / "claims" / "emergence" / row["run_id"] / "result.json").write_text(json.dumps(row))
    assert len(rows) == 8
    return root


@pytest.mark.parametrize("command, folder", [("leaderboard", "linear-map"), ("rank", "linear-map"),
                                             ("claims", "claims")])
def test_the_readers_on_real_rows_import_neither_torch_nor_lightning(command, folder, real_rows):
    """Their measurements are declared without Lightning (emergence_bench.measurements), and the
    claims patch no run here (a folder without a `patching` group: patching, torch's, is lazy)."""
    (said,) = answers([[command, str(real_rows / folder)]], real_rows)
    assert said["status"] == 0 and said["imports"] == ["pandas"], said


@pytest.mark.parametrize("flag", ["--trainer.max_stepz=3", "--trainer.max_steps=-1", "--optim.lr=-1",
                                  "--model.init=xavier", "--checkpoints.every=-2", "--trainer.threads=0"])
def test_a_bad_fixed_section_key_or_value_is_refused_without_torch(flag, tmp_path):
    assert answer(["run", flag], tmp_path) == {"status": 2, "torch": False, "lightning": False}


@pytest.mark.parametrize("flag", ["--task.widht=3", "--task.name=linear_mpa", "--task.state_size=x", "--mixer.widht=3",
                                  "--mixer.name=transformr", "--callbacks.plateau.fraq=0.2", "--callbacks.plateu=true"])
def test_a_bad_component_key_is_refused_without_torch(flag, tmp_path):
    """A task's, mixer's or callback's keys are read from its package's catalog (issue 55: a task-key
    mistake once imported Lightning, 3-8 s under load)."""
    assert answer(["run", flag], tmp_path) == {"status": 2, "torch": False, "lightning": False}


def test_list_imports_neither_torch_nor_lightning(tmp_path):
    assert answer(["list"], tmp_path) == {"status": 0, "torch": False, "lightning": False}


def test_output_piped_into_a_reader_that_left_ends_quietly(tmp_path):
    """`emergence-bench list | head -1`: the reader leaves, and the command ends with 141 (as a shell
    reports SIGPIPE), no traceback and no "this is a bug". Here the reader has left before the
    command writes (the pipe's read end closed first), so every write fails."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "emergence_bench", "list"], stdout=write, stderr=subprocess.PIPE,
                                cwd=tmp_path, text=True, timeout=300,
                                env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    finally:
        os.close(write)
    assert result.returncode == 141 and result.stderr == "", result.stderr


def test_a_sweeps_bad_fixed_section_flag_is_refused_without_torch(tmp_path):
    assert answer(["sweep", "quick", "--trainer.max_stepz=3", "--out", str(tmp_path / "out")], tmp_path) == {
        "status": 2, "torch": False, "lightning": False}


def test_a_broken_pipe_that_is_not_the_output_is_a_bug_not_silence(monkeypatch, capsys):
    """A socket or pipe of the command's own (Chromium's, say) that breaks is reported as a bug with
    its traceback; only a closed standard output ends quietly."""
    from emergence_bench import cli
    from emergence_bench.commands import COMMANDS

    def broken(args, extra):
        raise BrokenPipeError("the browser's socket closed")

    import dataclasses

    monkeypatch.setitem(COMMANDS._entries, "list", dataclasses.replace(COMMANDS["list"], main=broken))
    assert cli.main(["list"]) == cli.EXIT_BUG
    err = capsys.readouterr().err
    assert "BrokenPipeError: the browser's socket closed" in err and "this is a bug" in err
