"""A real sweep of worker processes stopped by a signal, or losing a worker to SIGKILL."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

RUNS = 4
START = 600  # seconds a sweep may take to start training (spawned workers import torch; a loaded CI is slow)


def sweep_file(tmp_path: Path, tiny_config, steps: int) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "sig", "base": tiny_config(trainer={"max_steps": steps}),
                                    "grid": {"seed": list(range(RUNS))}}))
    return path


def start(cli_executable: str, path: Path, out: Path, *flags: str, workers: int = 2) -> subprocess.Popen:
    """The sweep in a session of its own, so every process it starts can be found by its session id."""
    return subprocess.Popen([cli_executable, "sweep", str(path), "--out", str(out), "--workers", str(workers), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def session(sid: int) -> list[int]:
    """The processes of session ``sid`` still alive (zombies are dead: only their entry is left)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # after the name: state, ppid, pgrp, session
            alive.append(int(stat.parent.name))
    return alive


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def assert_stops(driver: subprocess.Popen) -> None:
    """Within 10 s of the signal every worker is gone; the driver then ends (Python's own shutdown of
    torch takes a few seconds more on a loaded machine: 5 s measured at load 11 on 2 cores), leaving
    nothing of the sweep behind."""
    wait_for(lambda: session(driver.pid) in ([], [driver.pid]), 10, "the workers to end")
    driver.wait(timeout=120)
    wait_for(lambda: not session(driver.pid), 10, "the sweep's processes to end")


def training(out: Path) -> list[tuple[str, int]]:
    """(run id, process id) of each run a process holds now: its lock names it, and it has no row yet."""
    held = []
    for lock in (out / ".locks").glob("*.lock"):
        run_id, text = lock.stem, lock.read_text()
        if text.startswith("process ") and not (out / run_id / "result.json").exists():
            held.append((run_id, int(text.split()[1])))
    return held


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_signal_stops_the_sweep_and_every_process_it_started(signum, code, tmp_path, cli, cli_executable,
                                                                tiny_config):
    path, out = sweep_file(tmp_path, tiny_config, steps=150), tmp_path / "out"
    driver = start(cli_executable, path, out)
    wait_for(lambda: len(training(out)) == 2 or driver.poll() is not None, START, "two runs training")
    assert driver.poll() is None, driver.communicate()
    assert len(session(driver.pid)) >= 3  # the driver and its two workers
    os.kill(driver.pid, signum)  # the driver alone, as `kill` or `timeout` sends it
    assert_stops(driver)
    _, err = driver.communicate()
    assert driver.returncode == code, err
    lines = [line for line in err.splitlines() if "stopped by" in line]
    assert len(lines) == 1 and f"stopped by {signal.Signals(signum).name}" in lines[0], err
    rows = [json.loads(p.read_text()) for p in out.glob("*/result.json")]
    assert all(r["status"] == "ok" for r in rows)  # the running ones are left without a row, not failed
    assert f"{len(rows)} of {RUNS} runs finished" in lines[0]
    if signum != signal.SIGTERM:
        return
    finished = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/result.json")}
    resumed = cli("sweep", path, "--out", out, "--workers", "2", timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(finished)} already finished, {RUNS - len(finished)} to run" in resumed.stderr
    after = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/result.json")}
    assert len(after) == RUNS and all(after[run_id] == mtime for run_id, mtime in finished.items())


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_reported_lost_and_the_sweep_goes_on(tmp_path, cli, cli_executable, tiny_config):
    path, out = sweep_file(tmp_path, tiny_config, steps=150), tmp_path / "out"
    driver = start(cli_executable, path, out)
    wait_for(lambda: training(out) or driver.poll() is not None, START, "a run training")
    assert driver.poll() is None, driver.communicate()
    run_id, pid = training(out)[0]
    os.kill(pid, signal.SIGKILL)
    _, err = driver.communicate(timeout=900)
    assert driver.returncode == 1, err  # a run failed: the lost one
    assert f"{RUNS}/{RUNS} done · failed 1" in err and "WorkerLost" in err and "SIGKILL" in err
    rows = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/result.json")}
    assert len(rows) == RUNS
    assert rows[run_id]["status"] == "failed" and f"worker process {pid} was killed by SIGKILL" in rows[run_id]["error"]
    assert all(r["status"] == "ok" for k, r in rows.items() if k != run_id)
    board = cli("leaderboard", out)
    assert board.returncode == 0 and "1 failed" in board.stdout, board.stderr
    resumed = cli("sweep", path, "--out", out, "--workers", "2", timeout=900)
    assert resumed.returncode == 0 and f"{RUNS - 1} already finished, 1 to run" in resumed.stderr, resumed.stderr
    assert json.loads((out / run_id / "result.json").read_text())["status"] == "ok"


@pytest.mark.slow
def test_seed_parallel_groups_stop_cleanly_too(tmp_path, cli_executable, tiny_config):
    path, out = sweep_file(tmp_path, tiny_config, steps=150), tmp_path / "out"
    driver = start(cli_executable, path, out, "--seed-parallel", "2", "--batching", "always")
    wait_for(lambda: len(training(out)) >= 2 or driver.poll() is not None, START, "a group training")
    assert driver.poll() is None, driver.communicate()
    os.kill(driver.pid, signal.SIGTERM)
    assert_stops(driver)
    _, err = driver.communicate()
    assert driver.returncode == 143, err
    assert all(json.loads(p.read_text())["status"] == "ok" for p in out.glob("*/result.json"))


@pytest.mark.slow
def test_a_sweep_without_worker_processes_stops_the_same_way(tmp_path, cli_executable, tiny_config):
    """--workers 1 trains in the driver itself: the signal reaches it inside Lightning's fit."""
    path, out = sweep_file(tmp_path, tiny_config, steps=150), tmp_path / "out"
    driver = start(cli_executable, path, out, workers=1)
    wait_for(lambda: training(out) or driver.poll() is not None, START, "a run training")
    assert driver.poll() is None, driver.communicate()
    os.kill(driver.pid, signal.SIGTERM)
    assert_stops(driver)
    _, err = driver.communicate()
    assert driver.returncode == 143, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err
    assert all(json.loads(p.read_text())["status"] == "ok" for p in out.glob("*/result.json"))
