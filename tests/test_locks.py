"""Two processes on one results folder: a run is trained by one of them only
(emergence_bench.engine.run_folder.RunLock)."""

import os
import re
import subprocess
import sys

import pytest
import yaml

from emergence_bench.config import resolve
from emergence_bench.engine.run import run
from emergence_bench.engine.run_folder import RunBusy, RunFolder, RunLock


def test_a_held_run_is_refused_and_released_once_its_row_is_written(tmp_path, tiny_config):
    config = resolve(tiny_config())
    held = RunLock(tmp_path, config.run_id())
    with pytest.raises(RunBusy, match=f"process {os.getpid()}"):
        run(config, tmp_path)
    held.release()
    assert run(config, tmp_path)["status"] == "ok"
    RunLock(tmp_path, config.run_id()).release()  # free again once the row is written
    with pytest.raises(RunBusy, match="finished by another process"):
        RunFolder(config, tmp_path, unfinished_only=True)


@pytest.mark.slow
def test_two_sweeps_on_one_folder_train_each_run_once(tmp_path, tiny_config):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "twice", "base": tiny_config(trainer={"max_steps": 40}),
                                     "grid": {"seed": list(range(6))}}))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "emergence_bench", "sweep", str(sweep), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first, second = (subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2))
    logs = [p.communicate(timeout=300)[1] for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, logs
    trained = [set(re.findall(r"(linear_map-\S+) ok", log)) for log in logs]
    assert not trained[0] & trained[1]  # no run trained by both
    assert len(trained[0] | trained[1]) == 6 == len(list(out.glob("*/result.json")))
