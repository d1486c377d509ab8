"""The Ray executor against a real two-CPU Ray cluster started by the test on this machine."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")
RAY = str(Path(sys.executable).parent / "ray")
# A loopback test cluster: no usage stats, and no token auth (Ray turns it on by itself when some
# earlier local Ray left ~/.ray/auth_token behind, and then a fresh cluster and its driver disagree).
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    port = free_port()
    env = {**os.environ, **RAY_ENV}
    temp = tmp_path_factory.mktemp("ray")
    subprocess.run([RAY, "start", "--head", "--num-cpus=2", f"--port={port}", "--node-ip-address=127.0.0.1",
                    "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
                   check=True, capture_output=True, env=env, timeout=180)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True, env=env, timeout=120)


@pytest.mark.slow
def test_ray_sweep_killed_midway_resumes_without_repeats_or_losses(cluster, tmp_path, cli, cli_executable, tiny_config):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "ray", "base": tiny_config(trainer={"max_steps": 150}),
                                          "grid": {"seed": [0, 1, 2, 3, 4, 5]}}))
    out = tmp_path / "out"
    args = [cli_executable, "sweep", str(sweep_file), "--out", str(out), "--executor", "ray", "--address", cluster]
    driver = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                              env={**os.environ, **RAY_ENV})
    deadline = time.time() + 240
    while not list(out.glob("*/result.json")) and time.time() < deadline and driver.poll() is None:
        time.sleep(0.05)
    assert driver.poll() is None, "the sweep finished before it could be killed: make its runs longer"
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    first = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/result.json")}
    assert 1 <= len(first) < 6

    result = cli("sweep", sweep_file, "--out", out, "--executor", "ray", "--address", cluster, timeout=400,
                 env=RAY_ENV)
    assert result.returncode == 0, result.stderr
    assert f"{len(first)} already finished, {6 - len(first)} to run on Ray" in result.stderr
    after = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/result.json")}
    assert len(after) == 6 and all(after[k] == v for k, v in first.items())
    for path in out.glob("*/result.json"):
        record = json.loads(path.read_text())
        assert record["status"] == "ok"
        # The worker's files came back with the row: the driver's folder is complete.
        assert (path.parent / "config.yaml").is_file() and (path.parent / "attention_maps.pt").is_file()
        assert list((path.parent / "tensorboard").glob("events.out.tfevents.*"))


def test_store_writes_files_then_the_result(tmp_path):
    from emergence_bench.execution.ray_executor import store

    run_dir = tmp_path / "run"
    (run_dir / "stale").mkdir(parents=True)
    store(run_dir, {"run_id": "run", "status": "ok"}, {"config.yaml": b"seed: 0\n", "tensorboard/e": b"x"})
    assert sorted(p.name for p in run_dir.rglob("*")) == ["config.yaml", "e", "result.json", "tensorboard"]
    assert json.loads((run_dir / "result.json").read_text())["status"] == "ok"
