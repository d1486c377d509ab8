"""A measurement declares itself once (``emergence_bench.measurements``): a measurement registered here
becomes leaderboard columns aggregated as declared, censoring included, and the influence probe is
declared in its own file alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest

from emergence_bench.config import resolve
from emergence_bench.forecast.features import probe_history
from emergence_bench.measurements import MEASUREMENTS, measurement, measurements, register_measurement
from emergence_bench.reporting import leaderboard
from emergence_bench.results.columns import Mean, Median
from emergence_bench.results.measurement import Measurement

REPO = Path(__file__).resolve().parents[1]


class SpeckSection(TypedDict, total=False):
    found_step: int | None  # None: never found within the budget
    sharpness: float


SPECK = Measurement("speck", section="speck", fields=SpeckSection,
                    columns=(Median("median_speck_found", "found_step", measured="speck_measured",
                                    header="median speck found", absent="-", optional=True),
                             Mean("mean_sharpness", "sharpness", better="higher", header="sharpness")))


@pytest.fixture
def speck():
    measurements()  # the built-ins first, so the test's columns come last
    yield register_measurement(SPECK)
    MEASUREMENTS.remove("speck")


def row(seed: int, speck: dict | None = None, status: str = "ok", budget: int = 1000) -> dict:
    record = {"run_id": f"run-{seed}", "status": status, "seed": seed, "config": resolve({"seed": seed}).to_dict(),
              "timing": {"steps": budget, "steps_per_second": 10.0}, "emergence": {"step": None},
              "plateau": {"end_step": None, "censored": True, "worth": False, "first_drop_step": None}}
    if speck is not None:
        record["speck"] = speck
    return record


def test_a_registered_measurement_is_columns_aggregated_as_declared_with_censoring(speck):
    runs = [row(0, {"found_step": 100, "sharpness": 1.0}), row(1, {"found_step": 300, "sharpness": 2.0}),
            row(2, {"found_step": None, "sharpness": 6.0}),  # never found: censored at its budget of 1000
            row(3),  # did not measure it: left out, not censored
            row(4, {"found_step": 50, "sharpness": 100.0}, status="failed")]  # failed: not a measured run
    table = leaderboard.build(runs)
    columns = list(table.columns)
    after = columns.index("steps_per_second") + 1  # the built-in measurements' columns end there
    assert columns[after:after + 3] == ["median_speck_found", "speck_measured", "mean_sharpness"]
    (only,) = table.to_dict("records")
    # Kaplan–Meier over 100, 300, 1000 (censored): S(100) = 2/3, S(300) = 1/3 ≤ 0.5 → 300. Dropping the
    # censored run would give 100 (S(100) = 1/2), the mean of the found steps 200.
    assert only["median_speck_found"] == 300 and only["speck_measured"]
    assert only["mean_sharpness"] == pytest.approx(3.0)
    markdown = leaderboard.to_markdown(table)
    header = markdown.splitlines()[0]
    assert header.endswith("| steps/s | median speck found | sharpness |")
    assert "| 300 | 3 |" in markdown


def test_a_censored_median_reads_as_not_reached_and_an_unmeasured_optional_column_is_hidden(speck):
    never = [row(s, {"found_step": None, "sharpness": 1.0}, budget=500) for s in range(3)]
    (only,) = leaderboard.build(never).to_dict("records")
    assert only["median_speck_found"] is None and only["speck_measured"]
    assert "| >500 |" in leaderboard.to_markdown(leaderboard.build(never))
    plain = leaderboard.build([row(s) for s in range(2)])
    assert not plain["speck_measured"].any() and plain["mean_sharpness"].isna().all()
    assert "median speck found" not in leaderboard.to_markdown(plain)  # optional: no row measured it
    assert "| sharpness |" in leaderboard.to_markdown(plain)  # not optional: shown, as "-"


def test_a_measurement_name_or_column_is_declared_once(speck):
    with pytest.raises(ValueError, match="registered twice"):
        register_measurement(Measurement("speck", section="speck", fields=SpeckSection, columns=()))
    clash = Measurement("other", section="other", fields=SpeckSection,
                        columns=(Mean("success_rate", "rate", better="higher"),))
    with pytest.raises(ValueError, match=r"success_rate \(of emergence\)"):
        register_measurement(clash)
    assert "other" not in {m.name for m in measurements()}


def test_the_built_in_columns_keep_the_leaderboards_order():
    """The CSV and JSON columns, frame first, as they were before the measurements declared them, with
    the held plateau's worth count and the first drop after the plateau's end (schema 3) and the
    abruptness rule's columns before the share's."""
    names = [name for m in measurements() for column in m.columns for name in column.names]
    assert names == ["emerged", "success_rate", "success_low", "success_high", "median_emergence_step",
                     "emergence_low", "emergence_high", "median_plateau_end", "plateau_low", "plateau_high",
                     "plateau_measured", "held_worth", "held_measured_runs", "median_first_drop", "first_drop_low",
                     "first_drop_high", "first_drop_measured", "median_pattern_found", "probed",
                     "median_influence_found", "influence_probed", "abrupt_cells_rule", "cells_with_drop",
                     "median_onset", "median_decades", "abrupt_cells", "cells_with_transition",
                     "median_transition_share", "budget", "final_eval_loss", "final_full_sequence_loss",
                     "shortcut_loss", "plateau_measures_shortcut", "pattern_cells_learned", "pattern_cells",
                     "shortcut_cells_learned", "shortcut_cells", "steps_per_second"]


def test_the_influence_probe_is_declared_in_its_measurements_file_only():
    from emergence_bench.measurements.influence_probe import INFLUENCE_PROBE, InfluenceProbeSection

    assert measurement("influence_probe") is INFLUENCE_PROBE and INFLUENCE_PROBE.fields is InfluenceProbeSection
    for path in ("benchmark/results/row.py", "benchmark/reporting/leaderboard.py", "benchmark/reporting/rank.py",
                 "benchmark/reporting/report.py", "benchmark/forecast/features.py", "callbacks/forecast_stop.py"):
        source = (REPO / path).read_text()
        assert "influence_probe" not in source and "median_influence_found" not in source, path


def test_the_forecast_reads_the_first_declared_pattern_probe_the_run_measured():
    history = [[100, 0.2, 1.5], [200, 0.6, 0.9]]
    no_scores = {"attention_probe": {"applicable": False, "not_applicable": "no scores"},
                 "influence_probe": {"history": history}}
    assert probe_history(no_scores) == history
    both = {"attention_probe": {"applicable": True, "history": [[100, 0.9, 0.1]]},
            "influence_probe": {"history": history}}
    assert probe_history(both) == [[100, 0.9, 0.1]]
    assert probe_history({}) == []


def test_every_declared_figure_is_a_report_figure():
    from emergence_bench.reporting import figures  # noqa: F401  (registers them)
    from emergence_bench.reporting.figure import REGISTRY

    for m in measurements():
        assert set(m.figures) <= set(REGISTRY), (m.name, set(m.figures) - set(REGISTRY))


PLUGIN = '''
from typing import TypedDict

import lightning as L

from emergence_bench.measurements import register_measurement
from emergence_bench.results.measurement import Measurement
from emergence_bench.results.columns import Median


class GlintSection(TypedDict, total=False):
    step: int | None


GLINT = register_measurement(Measurement("glint", section="glint", fields=GlintSection, columns=(
    Median("median_glint", "step", measured="glinted", header="median glint", absent="-"),)))


class Glint(L.Callback):
    def __init__(self, task):
        self.task = task

    def report(self) -> GlintSection:
        return {"step": None}
'''


def test_a_plugin_callback_adds_its_columns_without_touching_the_core(tmp_path, cli, fake_distribution):
    site = fake_distribution(tmp_path / "site", PLUGIN, "[emergence_bench.callbacks]\nglint = fake_mixers:Glint\n")
    for seed, step in enumerate([40, 80, None]):
        record = {**row(seed), "schema_version": 2, "error": None, "glint": {"step": step}}
        (tmp_path / "runs" / f"run-{seed}").mkdir(parents=True)
        (tmp_path / "runs" / f"run-{seed}" / "result.json").write_text(json.dumps(record))
    board = cli("leaderboard", tmp_path / "runs", env={"PYTHONPATH": str(site)})
    assert board.returncode == 0, board.stderr
    header, _, line = board.stdout.splitlines()[:3]
    assert header.endswith("| steps/s | median glint |") and line.endswith("| 80 |")  # 40, 80, >1000: 80
    assert "median_glint,glinted" in (tmp_path / "runs" / "leaderboard.csv").read_text().splitlines()[0]
