"""Every result says where it came from (code, command, machine, policies); results from different
code are flagged."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from emergence_bench.results.store import code_version, git_state, mixed_code_note


def test_a_result_records_the_commit_the_command_and_the_policies(tmp_path, cli, tiny_config):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config()))
    result = cli("run", "--config", config, "--out", tmp_path / "runs", "--seed", "1")
    assert result.returncode == 0, result.stderr
    (path,) = (tmp_path / "runs").glob("*/result.json")
    provenance = json.loads(path.read_text())["provenance"]
    assert provenance["command"] == f"emergence-bench run --config {config} --out {tmp_path / 'runs'} --seed 1"
    git = provenance["git"]
    if git["commit"] is None:  # an installed copy, not a checkout
        assert git["note"] and git["dirty"] is None
    else:
        assert len(git["commit"]) == 40 and isinstance(git["dirty"], bool)
    assert provenance["threads"]["setting"] == "auto" and provenance["threads"]["used"] >= 1
    assert provenance["allocator"].startswith(("glibc", "allocator defaults"))
    assert provenance["machine"]["cpus"] >= 1


def test_the_commit_is_this_checkouts():
    repo = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
    if repo.returncode != 0:
        pytest.skip("the tests are not in a git checkout: nothing to compare with")
    assert git_state()["commit"] == repo.stdout.strip()  # the store moved into results/ once and lost it


def test_a_copy_outside_git_says_so(tmp_path):
    """The package copied out of its checkout (as an installed copy is) records no commit."""
    import emergence_bench

    root = tmp_path / "site"
    shutil.copytree(Path(emergence_bench.__file__).parent, root / "benchmark",
                    ignore=shutil.ignore_patterns("__pycache__"))
    probe = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('r', sys.argv[1]); "
             "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(m.git_state())")
    done = subprocess.run([sys.executable, "-c", probe, str(root / "benchmark" / "results" / "store.py")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "'commit': None" in done.stdout and "not a git checkout" in done.stdout


def row(commit, dirty=False):
    return {"provenance": {"git": {"commit": commit, "dirty": dirty}}}


def test_results_from_different_code_are_flagged():
    assert mixed_code_note([row("a" * 40), row("a" * 40)]) is None
    note = mixed_code_note([row("a" * 40), row("b" * 40), row("b" * 40)])
    assert "2 versions of the code" in note and "bbbbbbbbbb (2 runs)" in note and "aaaaaaaaaa (1 run)" in note
    assert "uncommitted" in mixed_code_note([row("a" * 40, dirty=True)])
    assert "2 versions" in mixed_code_note([row("a" * 40), {"status": "ok"}])  # an older row: not recorded
    assert code_version({"provenance": {"git": {"commit": None, "dirty": None, "note": "not a git checkout"}}}) \
        == "not a git checkout"


@pytest.mark.slow
def test_the_leaderboard_says_when_results_come_from_different_commits(tmp_path, cli, tiny_config):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(trainer={"max_steps": 10, "eval_every": 5})))
    for seed in (0, 1):
        assert cli("run", "--config", config, "--out", tmp_path / "runs", "--seed", seed).returncode == 0
    board = cli("leaderboard", tmp_path / "runs")
    assert board.returncode == 0 and "versions of the code" not in board.stderr
    (first, _) = sorted((tmp_path / "runs").glob("*/result.json"))
    record = json.loads(first.read_text())
    record["provenance"]["git"] = {"commit": "0" * 40, "dirty": False}  # as if computed at another commit
    first.write_text(json.dumps(record))
    board = cli("leaderboard", tmp_path / "runs")
    assert board.returncode == 0 and "2 versions of the code" in board.stderr and "0000000000 (1 run)" in board.stderr
