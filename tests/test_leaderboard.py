"""The leaderboard on hand-made result rows with known answers (no training)."""

from pathlib import Path

import pytest

from emergence_bench.config import resolve
from emergence_bench.reporting import leaderboard


def row(seed, mixer="transformer", emergence=None, plateau=None, bias=False, status="ok", budget=1000):
    """A row whose held plateau ends at ``plateau`` (None: still held), worth the name, and whose first
    drop came at half that step."""
    config = {"seed": seed, "mixer": {"name": mixer}}
    if bias:
        config["callbacks"] = {"attention_bias": {"strength": 5.0}}
    return {"run_id": f"{mixer}-{seed}-{bias}", "status": status, "seed": seed, "config": resolve(config).to_dict(),
            "timing": {"steps": budget, "steps_per_second": 10.0}, "metrics": {"final_eval_loss": 0.1},
            "emergence": {"step": emergence},
            "plateau": {"end_step": plateau, "censored": plateau is None, "worth": True,
                        "first_drop_step": None if plateau is None else plateau // 2},
            "attention_probe": {"applicable": mixer == "transformer", "pattern_found_step": emergence}}


def test_median_ratio_bounds():
    assert leaderboard.median_ratio(100, 1000, 400, 1000) == (0.25, "=")
    assert leaderboard.median_ratio(100, 1000, None, 1000) == (0.1, "<")
    assert leaderboard.median_ratio(None, 1000, 400, 1000) == (2.5, ">")
    assert leaderboard.median_ratio(None, 1000, None, 1000) == (None, None)


def test_groups_success_and_censoring_aware_medians():
    records = [row(0, emergence=100, plateau=50), row(1, emergence=300, plateau=80), row(2, plateau=90),
               row(3, status="failed")]
    (only,) = leaderboard.build(records).to_dict("records")
    assert only["seeds"] == 4 and only["failed"] == 1 and only["emerged"] == 2
    assert only["success_rate"] == pytest.approx(2 / 3)
    # KM over 100, 300, 1000(censored): S(100) = 2/3, S(300) = 1/3 → median 300 (not the mean, not 200).
    assert only["median_emergence_step"] == 300 and only["median_plateau_end"] == 80
    assert only["budget"] == 1000


def test_a_label_names_only_the_keys_that_differ_between_rows_of_its_task():
    """Two task families: linear_map at two state sizes, cellular_automata at one setting. The cellular
    automaton's keys differ from linear_map's (it lacks them), which is no reason to name them."""
    def task_row(seed, task):
        record = row(seed)
        record["config"] = resolve({"seed": seed, "task": task}).to_dict()
        return record

    records = [task_row(s, {"name": "linear_map", "state_size": size, "sparsity": 2})
               for s in (0, 1) for size in (8, 10)]
    records += [task_row(s, {"name": "cellular_automata", "rules": 2}) for s in (0, 1)]
    labels = sorted(leaderboard.build(records)["task"])
    assert labels == ["cellular_automata", "linear_map state_size=10", "linear_map state_size=8"]


def test_intervention_rows_sit_under_their_baseline_with_the_plateau_ratio():
    records = [row(s, plateau=p) for s, p in enumerate([400, 500, 600])] + \
              [row(s, plateau=p, bias=True) for s, p in enumerate([40, 50, 60])]
    table = leaderboard.build(records)
    assert list(table["intervention"]) == ["none", "attention_bias(strength=5.0, layers=auto, heads=all, "
                                                   "pattern=auto, until_step=None, anneal=False, in_eval=True)"]
    assert table["plateau_ratio"][1] == pytest.approx(0.1) and table["plateau_ratio_bound"][1] == "="
    markdown = leaderboard.to_markdown(table)
    assert "| 0.10× |" in markdown


def test_baseline_columns_against_the_transformer():
    records = [row(s, emergence=e, plateau=e // 2) for s, e in enumerate([200, 400, 600])] + \
              [row(s, mixer="mlp_mixer", emergence=e, plateau=e // 2) for s, e in enumerate([100, 200, 300])] + \
              [row(s, mixer="rwkv7") for s in range(3)]
    table = leaderboard.build(records, baseline="mixer=transformer")
    table.index = table["mixer"].str.split().str[0]  # labels also name the parameters that vary
    assert table.loc["transformer", "emergence_vs_baseline"] == 1.0
    assert table.loc["mlp_mixer", "emergence_vs_baseline"] == pytest.approx(0.5)
    assert table.loc["rwkv7", "emergence_vs_baseline_bound"] == ">"  # never emerged: at least 1000/400
    assert table.loc["rwkv7", "emergence_vs_baseline"] == pytest.approx(2.5)
    markdown = leaderboard.to_markdown(table)
    assert "emergence vs mixer=transformer" in markdown and ">2.50×" in markdown
    assert "n/a" in markdown  # mixers without attention scores have no pattern-found step
    with pytest.raises(ValueError, match="key=value"):
        leaderboard.build(records, baseline="mixer")
    with pytest.raises(ValueError, match="no config key 'mixr'"):
        leaderboard.build(records, baseline="mixr=transformer")


def test_influence_column_appears_when_some_run_measured_it():
    plain = [row(s, emergence=100, plateau=50) for s in range(2)]
    assert "influence" not in leaderboard.to_markdown(leaderboard.build(plain))
    probed = [dict(r, influence_probe={"pattern_found_step": 40}) for r in plain]
    markdown = leaderboard.to_markdown(leaderboard.build(probed))
    assert "median influence found" in markdown and "| 40 |" in markdown


def test_cells_learned_through_the_pattern_and_the_shortcut_and_the_shortcut_columns():
    records = []
    for seed, per_cell in enumerate([[100, None, 200, 300], [100, 150, None, None]]):
        record = row(seed, emergence=None, plateau=50)
        record["emergence"]["per_position"] = per_cell
        record["task_facts"] = {"shortcut_loss": 0.52, "shortcut_cells": [False, False, True, True]}
        record["metrics"]["final_eval_full_sequence_loss"] = 0.3 + seed * 0.1
        record["config"]["trainer"]["train_on"] = "all"  # shown only where every row was trained
        record["plateau"]["measures_shortcut"] = seed == 1
        records.append(record)
    (only,) = leaderboard.build(records).to_dict("records")
    # Pattern cells 0 and 1: 1 and 2 learned; shortcut cells 2 and 3: 2 and 0 learned.
    assert (only["pattern_cells_learned"], only["pattern_cells"]) == (1.5, 2)
    assert (only["shortcut_cells_learned"], only["shortcut_cells"]) == (1.0, 2)
    assert only["final_full_sequence_loss"] == pytest.approx(0.35) and only["shortcut_loss"] == 0.52
    markdown = leaderboard.to_markdown(leaderboard.build(records))
    for record in records:
        record["config"]["trainer"]["train_on"] = "scored"
    assert leaderboard.build(records)["final_full_sequence_loss"].isna().all()
    assert "| 1.5/2 + 1/2 |" in markdown and "(shortcut)" in markdown and "| 0.52 |" in markdown


def test_one_table_helper_renders_markdown_and_html():
    from emergence_bench.reporting.table import Table

    table = Table(["a", "b"], [["1 < 2", "x\ny"]])
    assert table.markdown() == "| a | b |\n|---|---|\n| 1 < 2 | x<br>y |"
    assert table.html() == ("<table><thead><tr><th>a</th><th>b</th></tr></thead>"
                            "<tbody><tr><td>1 &lt; 2</td><td>x<br>y</td></tr></tbody></table>")
    labelled = Table([], [["key", "value"]], row_headers=True)
    assert labelled.html() == "<table><tbody><tr><th>key</th><td>value</td></tr></tbody></table>"


def test_a_section_a_row_lacks_reads_as_empty():
    from emergence_bench.results.row import emergence_step, section, step_budget

    failed = {"status": "failed", "config": {"trainer": {"max_steps": 300}}}  # failed before training
    assert section(failed, "emergence") == {} and emergence_step(failed) is None and step_budget(failed) == 300
    ran = {**failed, "status": "ok", "emergence": {"step": 120}, "timing": {"steps": 250}}
    assert emergence_step(ran) == 120 and step_budget(ran) == 250


def rows_reaching_every_column() -> list[dict]:
    """Two mixers, an intervention, and runs that emerged, never did (censored), diverged, failed, were
    stopped by a forecast, ran the influence probe (found, and censored) or name shortcut cells."""
    records = [row(0, emergence=100, plateau=50), row(1, emergence=300, plateau=80), row(2, plateau=90),
               row(3, status="failed"), row(4, emergence=200, status="diverged")]
    records += [row(s, emergence=e, plateau=p, bias=True) for s, e, p in ((0, 60, 20), (1, None, 30), (2, 90, 25))]
    records += [row(s, mixer="rwkv7", emergence=e, plateau=p) for s, e, p in ((0, None, None), (1, 700, 400),
                                                                              (2, None, 500), (3, 650, 300))]
    records[-1]["influence_probe"] = {"pattern_found_step": 300}
    records[-2]["influence_probe"] = {"pattern_found_step": None}
    records[-3]["forecast_stop"] = {"stopped": True}
    for record, per_cell in ((records[0], [100, None, 80]), (records[1], [300, 250, None])):
        record["emergence"]["per_position"] = per_cell
        record["task_facts"] = {"shortcut_loss": 0.52, "shortcut_cells": [False, False, True]}
        record["plateau"]["measures_shortcut"] = True
    records[2]["metrics"]["final_eval_loss"] = 0.4
    return records


def test_the_tables_are_those_the_hand_wired_leaderboard_wrote():
    """Markdown and CSV, with and without a baseline, byte for byte as written by the leaderboard before
    the measurements declared its columns (commit c0dbb6b wrote the golden file from these rows). A
    changed config default changes only the labels (task, mixer, intervention): then rewrite the file."""
    parts = []
    for baseline in (None, "mixer=transformer"):
        table = leaderboard.build(rows_reaching_every_column(), baseline=baseline)
        parts += [f"=== md {baseline}\n", leaderboard.to_markdown(table),
                  f"=== csv {baseline}\n", table.to_csv(index=False)]
    golden = Path(__file__).parent / "golden" / "leaderboard_every_column.txt"
    assert "".join(parts) == golden.read_text(encoding="utf-8")


def test_the_report_leaves_out_a_column_that_is_empty_in_every_row():
    from emergence_bench.reporting.table import Table

    table = Table(["task", "setting", "final loss"], [["linear_map", "-", "0.1"], ["dyck", "-", "-"]])
    shown, empty = table.without_empty_columns()
    assert shown.header == ["task", "final loss"] and shown.rows == [["linear_map", "0.1"], ["dyck", "-"]]
    assert empty == ["setting"]
