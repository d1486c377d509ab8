"""The emergence forecast: the censored fit recovers a known model, features never read past their
window, the permutation p is uniform under the null, and a sweep's forecast stop ends runs as
forecast-stopped (never failed)."""

from __future__ import annotations

import copy
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from emergence_bench.forecast.evaluate import (
    Fleet,
    in_domain,
    permutation_p,
    replay_stop,
    scores,
    stop_savings,
    transfer,
)
from emergence_bench.forecast.features import FEATURES, outcome, window_features
from emergence_bench.forecast.survival import LogNormalAFT, concordance, fit
from emergence_bench.results.store import load_records, write_json


def censored_sample(n: int, seed: int, budget: float = 7.0):
    """log T = 6 + 0.8·x1 − 0.5·x2 + 0.3·ε, censored at log budget."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    log_t = 6 + 0.8 * X[:, 0] - 0.5 * X[:, 1] + 0.3 * rng.normal(size=n)
    censored = log_t > budget
    return X, np.minimum(log_t, budget), censored


def test_censored_fit_recovers_the_model_where_dropping_censored_runs_does_not():
    X, y, censored = censored_sample(4000, seed=0, budget=6.0)
    assert 0.4 < censored.mean() < 0.6  # half the runs never emerged
    model = fit(X, y, censored, ["x1", "x2"], ridge=0.0)
    raw = model.coef / model.spread  # back to the scale of X
    intercept = model.intercept - (model.center / model.spread) @ model.coef
    assert raw == pytest.approx([0.8, -0.5], abs=0.03)
    assert intercept == pytest.approx(6.0, abs=0.03)
    assert model.sigma == pytest.approx(0.3, abs=0.02)
    dropped = fit(X[~censored], y[~censored], censored[~censored], ridge=0.0)
    assert np.abs(dropped.coef / dropped.spread - [0.8, -0.5]).min() > 0.07  # what the censored fit avoids


def test_p_within_budget_is_the_model_probability():
    model = LogNormalAFT(["x"], np.zeros(1), np.ones(1), math.log(1000), np.array([0.0]), 0.5)
    assert model.p_within([[0.0]], 1000)[0] == pytest.approx(0.5)
    assert model.p_within([[0.0]], 1000 * math.exp(0.5 * 1.96))[0] == pytest.approx(0.975, abs=1e-3)


def test_concordance_counts_only_pairs_whose_earlier_run_emerged():
    y = np.array([1.0, 2.0, 3.0])
    assert concordance(np.array([1, 2, 3]), y, np.array([False, False, False])) == 1.0
    assert concordance(np.array([3, 2, 1]), y, np.array([False, False, False])) == 0.0
    # Run 0 censored at 1: nothing is known of its order against the others; only (1, 2) counts.
    assert concordance(np.array([9, 1, 2]), y, np.array([True, False, False])) == 1.0


def row(mass_by_step: dict[int, float], emerged: int | None, max_steps: int = 1000) -> dict:
    """A result row with a probe history and eval curves, as a run writes them."""
    steps = sorted(mass_by_step)
    return {
        "config": {"trainer": {"max_steps": max_steps}},
        "task_facts": {"chance_loss": 0.69},
        "timing": {"steps": emerged or max_steps},
        "attention_probe": {"applicable": True,
                            "history": [[s, mass_by_step[s], 2.0 - mass_by_step[s]] for s in steps]},
        "curves": {"eval": [[s, 0.7 - 0.5 * mass_by_step[s], mass_by_step[s]] for s in steps],
                   "eval_cells": [[s, [0.7 - mass_by_step[s], 0.1]] for s in steps]},
        "emergence": {"step": emerged, "censored": emerged is None},
    }


def test_no_feature_reads_past_the_window():
    base = row({s: 0.2 + 0.0004 * s for s in range(0, 1001, 50)}, emerged=900)
    before = window_features(base, 400)
    later = copy.deepcopy(base)
    for section in (later["attention_probe"]["history"], later["curves"]["eval"], later["curves"]["eval_cells"]):
        for entry in section:
            if entry[0] > 400:  # every record after the window, changed
                entry[1] = [5.0, 5.0] if isinstance(entry[1], list) else 0.99
    later["emergence"] = {"step": 450, "censored": False}
    assert window_features(later, 400) == before
    earlier = copy.deepcopy(base)
    earlier["attention_probe"]["history"][8][1] = 0.9  # a record inside the window (step 400) does count
    assert window_features(earlier, 400)["mass"] != before["mass"]
    assert set(before) == set(FEATURES) and all(math.isfinite(v) for v in before.values())


def test_crossing_extrapolates_the_growth_of_the_mass():
    # logit(mass) rises by 1 per 100 steps from -3 at step 0: it reaches logit(0.5) = 0 at step 300.
    logits = {s: -3 + s / 100 for s in range(0, 201, 25)}
    features = window_features(row({s: 1 / (1 + math.exp(-v)) for s, v in logits.items()}, None), 200)
    assert math.exp(features["crossing"]) == pytest.approx(300, rel=1e-6)
    assert features["mass_rate"] == pytest.approx(10.0)  # per 1,000 steps
    flat = window_features(row({s: 0.2 for s in range(0, 201, 25)}, None), 200)
    assert math.exp(flat["crossing"]) == pytest.approx(2000)  # no growth: capped at 10 windows


def test_outcome_is_censored_at_the_steps_the_run_trained():
    assert outcome(row({0: 0.1}, emerged=300)) == (math.log(300), False)
    stopped = row({0: 0.1}, emerged=None)
    stopped["timing"]["steps"] = 250  # a forecast stopped it at 250 of 1,000
    assert outcome(stopped) == (math.log(250), True)


def test_permutation_p_is_uniform_under_the_null():
    rng = np.random.default_rng(1)
    ps = []
    for _ in range(200):
        forecast, y = rng.normal(size=20), rng.normal(size=20)
        censored = np.zeros(20, bool)
        observed = scores(forecast, y, censored, np.zeros(20))
        ps.append(permutation_p(observed, lambda y_, c_: scores(forecast, y_, c_, np.zeros(20)), y, censored,
                                permutations=49, seed=int(rng.integers(1 << 30)))["p_spearman"])
    ps = np.array(ps)
    assert 0.02 <= (ps <= 0.05).mean() <= 0.10  # about 5% below 0.05 (binomial 200, p 0.05: 3-17 of 200)
    assert 0.4 <= np.median(ps) <= 0.6
    # ... and small when the forecast is the outcome.
    y = rng.normal(size=20)
    observed = scores(y, y, np.zeros(20, bool), np.zeros(20))
    assert permutation_p(observed, lambda y_, c_: scores(y, y_, c_, np.zeros(20)), y, np.zeros(20, bool),
                         permutations=49, seed=0)["p_spearman"] == pytest.approx(1 / 50)


def test_a_score_not_defined_has_no_p_and_is_written_as_null(tmp_path, monkeypatch):
    # Two emerged runs: no correlation is defined, so neither is its p (it read 1/(1+permutations)).
    y, censored = np.array([5.0, 6.0, 7.0]), np.array([False, False, True])
    observed = scores(np.array([1.0, 2.0, 3.0]), y, censored, np.zeros(3))
    assert np.isnan(observed["spearman"])
    p = permutation_p(observed, lambda y_, c_: scores(np.array([1.0, 2.0, 3.0]), y_, c_, np.zeros(3)), y, censored,
                      permutations=9, seed=0)
    assert np.isnan(p["p_spearman"]) and 0 < p["p_c_index"] <= 1
    # ... and forecast.json stays strict JSON, with null for what is not defined.
    from emergence_bench.commands import forecast as command
    from emergence_bench.forecast import evaluate

    monkeypatch.setattr(command, "fleets", lambda rows: {"all runs": rows})
    monkeypatch.setattr(command, "window_of", lambda rows, window: 5)
    monkeypatch.setattr(command, "fleet", lambda name, rows, window: SimpleNamespace(y=y, window=window))
    monkeypatch.setattr(evaluate, "in_domain", lambda one, k, permutations: {
        "fit": "all runs", "apply": "all runs", "window": 5, "features": ["mass"], **observed, **p})
    from emergence_bench.results import store
    monkeypatch.setattr(store, "load_records", lambda root: [{"status": "ok"}] * 3)
    from emergence_bench.cli import main

    assert main(["forecast", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "forecast.json").read_text(),
                         parse_constant=lambda name: pytest.fail(f"{name} in forecast.json"))
    assert written["results"][0]["spearman"] is None and written["results"][0]["p_spearman"] is None


def fleet(n: int, seed: int, shift: float = 0.0) -> Fleet:
    X, y, censored = censored_sample(n, seed)
    noise = np.random.default_rng(seed + 1).normal(size=(n, 1))
    return Fleet(f"fleet {seed}", 100, np.hstack([X, noise]), y + shift, censored, ("x1", "x2", "noise"))


def test_leave_one_out_and_transfer_find_a_real_signal():
    result = in_domain(fleet(30, seed=2), k=2, permutations=19)
    assert result["features"] == ["x1", "x2"]  # the noise column is not selected
    assert result["c_index"] > 0.75 and result["mae"] < result["mae_baseline"]
    assert result["p_c_index"] == pytest.approx(1 / 20)
    moved = transfer(fleet(30, seed=2), fleet(30, seed=3, shift=1.0), k=2, permutations=19)
    assert moved["spearman"] > 0.6 and moved["p_spearman"] == pytest.approx(1 / 20)


@pytest.mark.slow  # five command-line processes; the pieces each have a fast test above
def test_forecast_command_and_forecast_stop_in_a_sweep(tmp_path, cli, tiny_config):
    fleets = tmp_path / "fleets"
    for i in range(10):  # two fleets of runs whose mass grows at a rate that sets their emergence step
        for sparsity, scale in ((2, 1.0), (3, 2.0)):
            rate = 0.5 + i / 10
            emerged = int(scale * 300 / rate) // 25 * 25
            r = row({s: 1 / (1 + math.exp(3 - rate * s / 100)) for s in range(0, emerged + 1, 25)}, emerged, 2000)
            r.update(schema_version=2, status="ok", run_id=f"run-{sparsity}-{i}", seed=i,
                     config={**tiny_config(seed=i, task={"sparsity": sparsity}), "trainer": {"max_steps": 2000}})
            write_json(fleets / r["run_id"] / "result.json", r)
    model = tmp_path / "model.json"
    done = cli("forecast", fleets, "--permutations", "9", "--save", f"sparsity=2={model}")
    assert done.returncode == 0, done.stderr
    assert "| sparsity=2 | sparsity=3 |" in done.stdout and (fleets / "forecast.json").exists()
    results = json.loads((fleets / "forecast.json").read_text())["results"]
    assert len(results) == 4 and all(r["c_index"] > 0.9 for r in results)

    # A saved model that forecasts emergence far beyond any budget stops every run at its window.
    saved = json.loads(model.read_text())
    saved["window"], saved["model"]["intercept"] = 20, 50.0
    model.write_text(json.dumps(saved))
    config = tmp_path / "sweep.yaml"
    config.write_text(json.dumps({"name": "stop", "base": tiny_config(trainer={"max_steps": 40}),
                                  "grid": {"seed": [0, 1]}}))
    out = tmp_path / "out"
    done = cli("sweep", config, "--out", out, "--forecast-stop", model, "--risk", "0.05")
    assert done.returncode == 0, done.stderr
    rows = load_records(out)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for r in rows:
        assert r["forecast_stop"]["stopped"] and r["forecast_stop"]["step"] == 20
        assert r["timing"]["steps"] == 20 and r["emergence"]["censored"]
    board = cli("leaderboard", out)
    assert "forecast-stopped" in board.stdout and board.returncode == 0

    # The same runs without the stop: replaying the forecast on their records decides as the live stop did.
    plain = tmp_path / "plain"
    assert cli("sweep", config, "--out", plain).returncode == 0
    known = load_records(plain)
    replayed = replay_stop(saved, known, risk=0.05)
    assert [(r["forecast_stop"]["stopped"], r["timing"]["steps"]) for r in replayed] == [(True, 20), (True, 20)]
    assert stop_savings(known, rows)["saved"] == pytest.approx(0.5)  # 20 of 40 steps each
    assert stop_savings(known, replayed) == stop_savings(known, rows)


def test_forecast_refuses_bad_input(tmp_path, capsys):
    from emergence_bench.cli import main

    assert main(["forecast", str(tmp_path / "missing")]) == 2
    assert "no such results directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["forecast", str(tmp_path / "empty")]) == 2
    assert "no finished runs" in capsys.readouterr().err
    assert main(["run", "--out", str(tmp_path / "runs"),
                 "--callbacks.forecast_stop.model", str(tmp_path / "none.json")]) == 2
    assert "forecast_stop.model" in capsys.readouterr().err


def test_stop_savings_counts_steps_and_wrong_stops():
    def run(seed: int, steps: int, emerged: int | None, stopped: bool = False) -> dict:
        r = {"config": {"seed": seed, "task": {"name": "linear_map"}, "trainer": {"max_steps": 1000},
                        "callbacks": {"forecast_stop": {"risk": 0.05}} if stopped else {}},
             "timing": {"steps": steps}, "emergence": {"step": emerged, "censored": emerged is None}}
        if stopped:
            r["forecast_stop"] = {"stopped": True, "step": steps}
        return r

    full = [run(0, 1000, None), run(1, 1000, None), run(2, 400, 400), run(3, 900, 900)]
    with_stop = [run(0, 200, None, True), run(1, 1000, None), run(2, 400, 400), run(3, 200, None, True)]
    saved = stop_savings(full, with_stop)
    assert saved["runs"] == 4 and saved["stopped"] == 2 and saved["wrongly_stopped"] == 1  # seed 3 would emerge
    assert saved["wrongly_stopped_of_emerged"] == 0.5 and saved["wrongly_stopped_of_runs"] == 0.25
    assert saved["saved"] == pytest.approx(1 - 1800 / 3300)
    with pytest.raises(ValueError, match="matches"):
        stop_savings(full, [run(9, 10, None, True)])
