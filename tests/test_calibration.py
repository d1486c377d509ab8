"""The calibration table and the abruptness check (emergence_bench.analysis) on result rows of known
shape written to a folder: a group whose cells drop late and sharply after a held loss, and one whose
cells decay smoothly from the first step."""

import json
import math

import numpy as np
import pytest

from emergence_bench.analysis.abruptness_check import check_folder, spearman
from emergence_bench.analysis.calibration import calibration, to_markdown
from emergence_bench.cli import main

STEPS = list(range(20, 1501, 20))
CHANCE = math.log(2)


def curve(kind: str, onset: float) -> list[float]:
    t = np.array(STEPS, dtype=float)
    if kind == "abrupt":  # held at chance, then a logistic drop 60 steps wide (10%-90%)
        return list(CHANCE / (1 + np.exp((t - onset - 30) / (60 / (2 * math.log(9))))))
    return list(CHANCE * (1 + t / 100) ** -1.0)  # a power law from step 0


def row(seed: int, kind: str, lr: float, length: int) -> dict:
    onsets = [600 + 40 * seed + 30 * cell for cell in range(3)]
    cells = [curve(kind, onset) for onset in onsets]
    emerged = max(onsets) + 100 if kind == "abrupt" else 300
    train = [[t, float(np.mean([c[i] for c in cells]))] for i, t in enumerate(STEPS)]
    return {"schema_version": 3, "run_id": f"{kind}-{lr}-{length}-{seed}", "status": "ok", "seed": seed,
            "config": {"seed": seed, "task": {"name": "induction", "length": length, "task_seed": 0},
                       "mixer": {"name": "transformer"}, "optim": {"lr": lr}, "trainer": {"max_steps": 1500}},
            "timing": {"steps": 1500}, "emergence": {"step": emerged},
            "task_facts": {"chance_loss": CHANCE, "floor_loss": 0.0},
            "curves": {"train_loss": train, "eval_cells": [[t, [c[i] for c in cells]] for i, t in enumerate(STEPS)]}}


@pytest.fixture
def folder(tmp_path):
    for group, kind in (("sharp", "abrupt"), ("smooth", "power")):
        for lr in (1e-3, 3e-3):
            for seed in range(4):
                r = row(seed, kind, lr, 16)
                path = tmp_path / group / r["run_id"]
                path.mkdir(parents=True)
                (path / "result.json").write_text(json.dumps(r))
    return tmp_path


def test_the_calibration_table_counts_plateaus_and_abrupt_cells_per_setting(folder):
    table = {(r["group"], r["setting"]): r for r in calibration(folder)}
    assert set(table) == {(g, f"optim.lr={lr}") for g in ("sharp", "smooth") for lr in ("0.001", "0.003")}
    sharp, smooth = table["sharp", "optim.lr=0.001"], table["smooth", "optim.lr=0.001"]
    assert (sharp["emerged"], sharp["abrupt_cells"], sharp["dropping_cells"],
            sharp["mostly_abrupt_seeds"]) == (4, 12, 12, 4)
    assert sharp["worth"] == 4 and 500 <= sharp["median_plateau_end"] <= 800  # held at chance, then the drops
    assert (smooth["abrupt_cells"], smooth["mostly_abrupt_seeds"], smooth["worth"]) == (0, 0, 0)
    assert "| sharp | optim.lr=0.001 | 4/4 | " in to_markdown(calibration(folder))


def test_the_abruptness_check_reads_the_rule_the_share_and_the_null(folder):
    checks = check_folder(folder, surrogate_draws=5)
    sharp, smooth = checks["sharp"], checks["smooth"]
    assert (sharp["cells_with_drop"], sharp["abrupt_by_rule"]) == (24, 24)
    assert smooth["abrupt_by_rule"] == 0 and smooth["surrogate_abrupt"] == 0 and smooth["surrogates"] == 5 * 24
    assert 600 <= sharp["onset"]["median"] <= 800 and sharp["decades"]["median"] <= 0.3


def test_spearman_on_known_orders():
    assert spearman([1, 2, 3, 4, 5, 6], [2, 4, 6, 8, 10, 12])[0] == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1])[0] == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 2, 3]) is None and spearman([1] * 6, list(range(6))) is None


def test_the_analyze_commands_write_their_tables_and_refuse_a_folder_without_rows(folder, tmp_path, capsys):
    assert main(["analyze", "calibration", str(folder)]) == 0
    assert "| smooth | optim.lr=0.003 | 4/4 |" in capsys.readouterr().out
    assert (folder / "calibration.md").is_file()
    assert main(["analyze", "abruptness", str(folder), "--surrogates", "0"]) == 0
    assert json.loads((folder / "abruptness-check.json").read_text())["sharp"]["abrupt_by_rule"] == 24
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["analyze", "calibration", str(empty)]) == 2
    assert "holds no result rows" in capsys.readouterr().err
