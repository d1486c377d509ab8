"""trainer.logger chooses Lightning's logger: TensorBoard event files or a metrics.csv; the result
is the same whichever logged, and the logger is not part of the run id."""

import csv

import pytest

from emergence_bench.config import ConfigError, resolve
from emergence_bench.engine.run import run


def test_a_csv_logger_run_writes_metrics_csv(tmp_path, tiny_config):
    record = run(tiny_config(trainer={"logger": "csv"}), tmp_path)
    assert record["status"] == "ok"
    run_dir = tmp_path / record["run_id"]
    with open(run_dir / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert any(r.get("train/loss") for r in rows) and any(r.get("eval/accuracy") for r in rows)
    assert max(int(r["step"]) for r in rows) >= 10
    assert not (run_dir / "tensorboard").exists()


def test_the_tensorboard_logger_writes_event_files_and_the_logger_is_not_in_the_run_id(tmp_path, tiny_config):
    record = run(tiny_config(), tmp_path)
    assert record["status"] == "ok" and record["config"]["trainer"]["logger"] == "tensorboard"
    assert list((tmp_path / record["run_id"] / "tensorboard").glob("events.out.tfevents.*"))
    assert resolve(tiny_config(trainer={"logger": "csv"})).run_id() == record["run_id"]


def test_an_unknown_logger_is_named(tiny_config):
    with pytest.raises(ConfigError, match="trainer.logger must be one of tensorboard, csv, wandb"):
        resolve(tiny_config(trainer={"logger": "mlflow"}))
