"""The command line as a user types it (each call is a fresh process)."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

PLUGIN_MODULE = '''
import torch
from torch import nn


class ShiftMixer(nn.Module):
    """Each position sees the previous one: out_t = W x_{t-1}."""

    def __init__(self, d_model, max_len, layer_idx, shift=1):
        super().__init__()
        self.shift = shift
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, ctx):
        shifted = torch.nn.functional.pad(x, (0, 0, self.shift, 0))[:, : x.shape[1]]
        return self.proj(shifted)
'''


@pytest.fixture
def write_config(tiny_config):
    """write_config(path, **sections) -> path, holding ``tiny_config(**sections)`` as YAML."""
    def write(path: Path, **sections) -> Path:
        path.write_text(yaml.safe_dump(tiny_config(**sections)))
        return path
    return write


def test_list_shows_mixers_tasks_parameters_and_presets(cli):
    result = cli("list")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "transformer" in out and "n_heads: int = 8   head_dim: int = 8" in out
    assert "linear_map" in out and "state_size: int = 8   sparsity: int = 3   trajectory_length: int = 2" in out
    assert "plateau" in out and "emergence" in out and "quick" in out


COMMAND_NAMES = ["list", "run", "sweep", "leaderboard", "rank", "report", "claims", "analyze", "lm-family", "forecast",
                 "speed", "check-mixer"]


def test_every_command_is_registered_and_the_parser_is_a_loop_over_them(capsys):
    from emergence_bench.cli import main, parser
    from emergence_bench.commands import COMMANDS

    assert list(COMMANDS) == COMMAND_NAMES
    assert "{" + ",".join(COMMAND_NAMES) + "}" in parser().format_usage()  # `--help` lists them, in this order
    described = " ".join(parser().description.split())
    assert ", ".join(COMMAND_NAMES) in described  # and its description names each (claims, lm-family too)
    for name in COMMAND_NAMES:  # each adds the parser of the name it is registered under
        with pytest.raises(SystemExit) as exit:
            main([name, "--help"])
        assert exit.value.code == 0 and capsys.readouterr().out.startswith(f"usage: emergence-bench {name} ")


def test_a_command_that_takes_no_config_keys_refuses_them_as_argparse_does(capsys):
    from emergence_bench.cli import EXIT_BAD_INPUT, main

    with pytest.raises(SystemExit) as exit:
        main(["leaderboard", "DIR", "--task.state_size", "4"])
    assert exit.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err == ("error: unrecognized arguments: --task.state_size 4 "
                                       "(see: emergence-bench leaderboard --help)\n")


@pytest.mark.slow
def test_plugin_mixer_is_listed_and_trains_and_a_broken_plugin_is_named(tmp_path, cli, fake_distribution, write_config):
    site = fake_distribution(tmp_path / "site", PLUGIN_MODULE,
                             "[emergence_bench.mixers]\nshift = fake_mixers:ShiftMixer\n"
                             "broken = fake_mixers_missing:Nothing\n")
    env = {"PYTHONPATH": str(site)}
    listing = cli("list", env=env)
    assert listing.returncode == 0, listing.stderr
    assert "shift  (fake_mixers.ShiftMixer" in listing.stdout and "shift: int = 1" in listing.stdout
    assert "broken" in listing.stderr and "failed to import" in listing.stderr
    said = [line for line in listing.stderr.splitlines() if "broken" in line]  # one clean line, not Python's
    assert len(said) == 1 and said[0].startswith("warning: mixer plugin 'broken' (fake_mixers_missing:Nothing)")
    assert "warnings.warn" not in listing.stderr
    assert "transformer" in listing.stdout  # everything else still works
    config = write_config(tmp_path / "c.yaml")
    result = cli("run", "--config", config, "--out", tmp_path / "runs", "--mixer", "{name: shift, shift: 2}", env=env)
    assert result.returncode == 0, result.stderr
    (record_path,) = (tmp_path / "runs").glob("*/result.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "ok" and record["config"]["mixer"] == {"name": "shift", "shift": 2}


def test_run_with_flags_writes_the_result(tmp_path, cli, write_config):
    config = write_config(tmp_path / "c.yaml")
    result = cli("run", "--config", config, "--out", tmp_path, "--task.state_size", "5", "--seed=3")
    assert result.returncode == 0, result.stderr
    assert "status ok" in result.stdout and "step     20/20" in result.stderr
    (record_path,) = tmp_path.glob("*/result.json")
    record = json.loads(record_path.read_text())
    assert record["seed"] == 3 and record["config"]["task"]["state_size"] == 5


@pytest.mark.slow
def test_bad_input_exits_non_zero_with_a_clear_message(tmp_path, cli, write_config):
    config = write_config(tmp_path / "c.yaml")
    cases = [
        (["--mixer.name", "transfomer"], "Did you mean 'transformer'"),
        (["--task.name", "linear"], "Did you mean 'linear_map'"),
        (["--task.sparsity", "9"], "sparsity must be in [1, 4], got 9"),
        (["--task.trajectory_length", "1"], "trajectory_length must be in [2, inf]"),
        (["--trainer.max_stepz", "3"], "unknown config key 'trainer.max_stepz'"),
    ]
    for flags, message in cases:
        result = cli("run", "--config", config, "--out", tmp_path / "runs", *flags)
        assert result.returncode == 2, (flags, result.stderr)
        assert message in result.stderr, (flags, result.stderr)
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written
    result = cli("sweep", "quik")
    assert result.returncode == 2 and "Did you mean 'quick'" in result.stderr


@pytest.mark.slow
def test_sweep_killed_after_first_result_resumes_without_repeating_or_losing_runs(tmp_path, cli, cli_executable,
                                                                                  tiny_config):
    sweep_file = tmp_path / "s.yaml"
    base = tiny_config(trainer={"max_steps": 40})
    sweep_file.write_text(yaml.safe_dump({"name": "kill", "base": base, "grid": {"seed": [0, 1, 2, 3]}}))
    out = tmp_path / "out"
    process = subprocess.Popen([cli_executable, "sweep", str(sweep_file), "--out", str(out)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    while not list(out.glob("*/result.json")) and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    first = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/result.json")}
    assert 1 <= len(first) < 4
    result = cli("sweep", sweep_file, "--out", out)
    assert result.returncode == 0, result.stderr
    assert f"{len(first)} already finished, {4 - len(first)} to run" in result.stderr
    after = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/result.json")}
    assert len(after) == 4
    assert all(after[run_id] == mtime for run_id, mtime in first.items())  # not rerun
    assert all(json.loads(p.read_text())["status"] == "ok" for p in out.glob("*/result.json"))
    again = cli("sweep", sweep_file, "--out", out)
    assert "4 already finished, 0 to run" in again.stderr
    board = cli("leaderboard", out)
    assert board.returncode == 0, board.stderr
    assert "| linear_map | transformer | - | none | 4 |" in board.stdout
    assert (out / "leaderboard.md").is_file() and (out / "leaderboard.csv").is_file()


@pytest.mark.slow
def test_sweep_with_two_workers_and_dry_run(tmp_path, cli, tiny_config):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "two", "base": tiny_config(), "grid": {"seed": [0, 1],
                                                                                         "task.sparsity": [1, 2]}}))
    dry = cli("sweep", sweep_file, "--dry-run", "--task.sparsity", "2")
    assert dry.returncode == 0 and len(dry.stdout.split()) == 2  # the override narrowed the grid axis
    result = cli("sweep", sweep_file, "--out", tmp_path / "out", "--workers", "2")
    assert result.returncode == 0, result.stderr
    assert "4/4 done" in result.stderr and "eta" in result.stderr
    assert len(list((tmp_path / "out").glob("*/result.json"))) == 4


@pytest.mark.slow
def test_quick_preset_expands_to_its_runs(cli):
    result = cli("sweep", "quick", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 8


@pytest.mark.slow
def test_speed_command_prints_every_mixer_and_writes_json(tmp_path, cli):
    from emergence_bench import registry

    out = tmp_path / "speed.json"
    result = cli("speed", "--quick", "--out", out)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    names = {row["mixer"] for row in report["mixers"]}
    assert names == {n for n in registry.mixers.names() if not n.startswith("test_")}
    for name in names:
        assert f"| {name} | 16 | 8 |" in result.stdout  # the ranking's K = 8 seeds batched
    transformer = next(r for r in report["mixers"] if r["mixer"] == "transformer")
    assert transformer["vs_transformer"]["median"] == 1 and transformer["step_ms"] > 0  # the reference itself
    assert "| transformer | 16 | 8 |" in result.stdout and "1 (reference)" in result.stdout
    cells = {(r["family"], r["mixer"]) for r in report["cells"]}
    assert cells == {(f, n) for f in ("linear-map", "cellular-automata", "mqar", "dyck") for n in names}
    # --quick honours --mixers and --lengths
    result = cli("speed", "--quick", "--mixers", "lru", "--lengths", "8,12", "--no-cells", "--out", out)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert [(r["mixer"], r["length"]) for r in report["mixers"]] == [("lru", 8), ("lru", 12)] and not report["cells"]


@pytest.mark.slow
def test_analyze_is_wired_into_the_command(tmp_path, cli):
    result = cli("analyze", "emergence", tmp_path / "missing")
    assert result.returncode == 2 and "missing" in result.stderr


def test_a_warning_prints_as_one_line_like_an_error():
    from emergence_bench.cli import warning_line

    warning = UserWarning("mixer plugin 'x' failed to import:\n  ModuleNotFoundError")
    text = warning_line(warning, UserWarning, "f.py", 3)
    assert text == "warning: mixer plugin 'x' failed to import: ModuleNotFoundError\n"


@pytest.mark.parametrize("command, words", [
    ("run", ["--section.key VALUE", "--task.state_size 16", "emergence-bench list"]),
    ("sweep", ["--section.key VALUE", "in every run", "tuned first"]),
    ("check-mixer", ["--mixer.KEY VALUE", "builds, shape, causal", "noise, speed"]),
    ("leaderboard", ["DIR/leaderboard.md, .csv and .json", "replacing", "writes nothing", "DIR  "]),
    ("rank", ["DIR/rank.md, .csv and .json", "replacing", "writes nothing", "DIR  "]),
    ("report", ["DIR/report.html", "report_figures/", "DIR  "]),
    ("speed", ["(default: speed.json)", "(default 100)", "2 interleaved repeats"]),
    ("forecast", ["DIR  a results folder"]),
    ("lm-family", ["lm-family train OUT", "resume", "OUT/analysis/family.json"]),
])
def test_each_help_says_what_the_command_takes_and_writes(command, words, capsys):
    from emergence_bench.cli import main

    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare with single spaces
    for word in words:
        assert " ".join(word.split()) in text or word in text, (command, word)
