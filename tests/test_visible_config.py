"""A config you can see from the command line: --print-config round-trips to the same run, `list`
shows every section's keys with type and default, --version, floats written 1e-3, --grid."""

import json

import pytest
import yaml

from emergence_bench.cli import main
from emergence_bench.commands.sweep import grid_axis
from emergence_bench.config import load_yaml_text, parse_value, resolve
from emergence_bench.execution.sweep_spec import load_sweep


@pytest.mark.slow  # ~12 s: two runs through the CLI (make test stays under 4 minutes)
def test_print_config_fed_back_gives_the_same_run_id(tmp_path, cli, tiny_config):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config()))
    printed = cli("run", "--config", config, "--optim.lr", "3e-4", "--seed", "2", "--print-config")
    assert printed.returncode == 0, printed.stderr
    assert not (tmp_path / "runs").exists()  # printing trains nothing
    resolved = yaml.safe_load(printed.stdout)
    assert resolved["optim"]["lr"] == 3e-4 and resolved["seed"] == 2
    assert resolved["trainer"]["logger"] == "tensorboard" and "betas" in resolved["optim"]  # every default
    (tmp_path / "printed.yaml").write_text(printed.stdout)
    run = cli("run", "--config", tmp_path / "printed.yaml", "--out", tmp_path / "runs")
    assert run.returncode == 0, run.stderr
    (result,) = (tmp_path / "runs").glob("*/result.json")
    assert result.parent.name == resolve(tiny_config(optim={"lr": 3e-4}, seed=2)).run_id()
    assert json.loads(result.read_text())["config"] == resolved


def test_list_shows_every_section_with_types_and_defaults(capsys):
    assert main(["list"]) == 0  # in this process: test_cli runs `list` as a user types it
    out = capsys.readouterr().out
    for section in ("seed: int = 0", "task: name = linear_map", "mixer: name = transformer", "  model:", "  optim:",
                    "  trainer:", "  checkpoints:", "  callbacks:", "curriculum: list"):
        assert section in out, section
    for key in ("d_model: int = 64", "lr: float = 0.001", "schedule: constant | cosine | linear = constant",
                "max_steps: int = 1000", "logger: tensorboard | csv | wandb = tensorboard",
                "threads: int | auto = auto", "betas: tuple[float, float] = (0.9, 0.999)",
                "keep_freed_memory: bool = True", "log_spaced: bool = False", "frac: float = 0.1"):
        assert key in out, key


def test_version(cli):
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("emergence-bench 0.")


def test_exponent_floats_without_a_dot_are_floats_everywhere():
    assert parse_value("1e-3") == 1e-3 and parse_value("-2E+5") == -2e5 and parse_value("[1e-3, 3e-4]") == [1e-3, 3e-4]
    assert load_yaml_text("lr: 3e-4\nname: e5\nsteps: 12\nraw: 1e") == {"lr": 3e-4, "name": "e5", "steps": 12,
                                                                       "raw": "1e"}
    assert yaml.safe_load("1e-3") == "1e-3"  # PyYAML itself is left as it is


@pytest.mark.slow
def test_a_sweep_grid_of_learning_rates_written_1e_3_runs_both_values(tmp_path, cli, tiny_config):
    sweep_file = tmp_path / "lrs.yaml"
    base = tiny_config(trainer={"max_steps": 10, "eval_every": 5})
    sweep_file.write_text(yaml.safe_dump({"name": "lrs", "base": base}) + "grid: {optim.lr: [1e-3, 3e-3]}\n")
    assert [c.optim.lr for _, c in load_sweep(sweep_file).runs()] == [1e-3, 3e-3]
    result = cli("sweep", sweep_file, "--out", tmp_path / "runs")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/result.json")]
    assert sorted(r["config"]["optim"]["lr"] for r in rows) == [1e-3, 3e-3] and {r["status"] for r in rows} == {"ok"}


@pytest.mark.slow
def test_a_grid_axis_from_the_command_line(tmp_path, cli, tiny_config):
    assert grid_axis("optim.lr=1e-3,3e-3") == ("optim.lr", [1e-3, 3e-3])
    assert grid_axis("mixer={name: mamba},{name: lru}") == ("mixer", [{"name": "mamba"}, {"name": "lru"}])
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "s", "base": tiny_config(), "grid": {"seed": [0, 1]}}))
    listed = cli("sweep", sweep_file, "--grid", "optim.lr=1e-3,3e-3", "--grid", "model.n_layers=1,2", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert len(set(listed.stdout.split())) == 8  # 2 seeds × 2 learning rates × 2 depths
    printed = cli("sweep", sweep_file, "--grid", "optim.lr=1e-3,3e-3", "--dry-run", "--print-config")
    documents = list(yaml.safe_load_all(printed.stdout))
    assert printed.returncode == 0 and len(documents) == 4
    assert sorted(d["optim"]["lr"] for d in documents) == [1e-3, 1e-3, 3e-3, 3e-3]
    bad = cli("sweep", sweep_file, "--grid", "optim.lr", "--dry-run")
    assert bad.returncode == 2 and "--grid takes KEY=V1,V2" in bad.stderr
