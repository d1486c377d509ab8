"""The CLI answers before it loads the numerical stack: its parser, `--help`, `list`, and a config whose
keys are wrong (a fixed section's, or a task's, mixer's or callback's, read from its catalog) import
neither torch nor Lightning. Speed itself is measured, not tested (benchmark/perf/cli_latency.py);
what is tested is what each answer imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["sweep", "--help"], ["list", "--help"]])
def test_help_imports_no_torch(argv, tmp_path):
    assert answer(argv, tmp_path) == {"status": 0, "torch": False, "lightning": False}


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
                                cwd=tmp_path, text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
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
