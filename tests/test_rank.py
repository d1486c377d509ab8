"""The ranking (emergence_bench.reporting.rank) on synthetic result rows with known answers."""

import json

import pandas as pd
import pytest

from emergence_bench.config import ConfigError
from emergence_bench.reporting import rank, rank_tables
from emergence_bench.stats.medians import wilson_interval

BUDGET = 1000


def row(mixer: str, family: str, rung: int, seed: int, emerged: int | None, status: str = "ok",
        axis: str = "sparsity", extra_task: dict | None = None, plateau: int | None = None) -> dict:
    """A result row as run() writes it, with only what the ranking reads: its held plateau ends where its
    first drop does (``plateau``, else at its emergence; censored where neither came)."""
    task = {"name": family, axis: rung, **(extra_task or {})}
    end = plateau if plateau else emerged
    return {"schema_version": 3, "run_id": f"{family}-{mixer}-{rung}-{seed}", "status": status, "seed": seed,
            "parameters": 1000,
            "config": {"seed": seed, "task": task, "mixer": {"name": mixer}, "model": {}, "optim": {},
                       "trainer": {"max_steps": BUDGET}, "callbacks": {}},
            "timing": {"steps": BUDGET},
            "emergence": {"step": emerged},
            "plateau": {"end_step": end, "censored": end is None, "worth": True, "first_drop_step": end,
                        "first_drop_censored": end is None}}


def seeds(mixer, family, rung, outcomes, **kw) -> list[dict]:
    """One row per outcome (an emergence step, or None: never emerged)."""
    return [row(mixer, family, rung, i, o, **kw) for i, o in enumerate(outcomes)]


def ladder_records() -> list[dict]:
    return (seeds("a", "linear_map", 1, [100, 120, 140]) + seeds("a", "linear_map", 2, [300, 400, 500])
            + seeds("a", "linear_map", 3, [None, None, None])
            + seeds("b", "linear_map", 1, [600, None, None]) + seeds("b", "linear_map", 2, [None] * 3)
            + seeds("b", "linear_map", 3, [None] * 3))


def test_frontier_area_and_cells_on_known_answers():
    ranked = rank.build(ladder_records())
    assert ranked["ladders"] == {"linear_map": {"axis": "task.sparsity", "rungs": [1, 2, 3]}}
    families = ranked["families"].set_index("mixer")
    # a: 3/3, 3/3, 0/3 -> frontier 2. Wilson(3 of 3) is (0.44, 1): never wholly above 50% with 3 seeds,
    # so the interval's low end is below the first rung; 0/3 reaches up to 0.56, so its high end is 3.
    assert wilson_interval(3, 3)[0] < 0.5 < wilson_interval(0, 3)[1]
    assert families.loc["a", "frontier"] == 2 and families.loc["a", "frontier_high"] == 3
    assert pd.isna(families.loc["a", "frontier_low"])
    assert families.loc["a", "area"] == pytest.approx(2 / 3)
    # b: 1/3, 0/3, 0/3 -> no rung at 50%: below the ladder.
    assert pd.isna(families.loc["b", "frontier"])
    assert families.loc["b", "area"] == pytest.approx(1 / 9)
    cells = ranked["cells"].set_index(["mixer", "rung"])
    assert cells.loc[("a", 2), "median_emergence_step"] == 400
    # Censoring: b at rung 1 emerged once in three (600, >1000, >1000): the KM median is not reached.
    assert pd.isna(cells.loc[("b", 1), "median_emergence_step"])
    ranking = ranked["ranking"]
    assert list(ranking["mixer"]) == ["a", "b"] and ranking["score"][0] == pytest.approx(2 / 3)


def test_markdown_names_the_frontier_and_censored_medians():
    ranked = rank.build(ladder_records())
    text = rank_tables.to_markdown(ranked)
    assert "| a | 2 [<first, 3] |" in text and "| b | <first [<first, 3] |" in text
    assert "| linear_map | task.sparsity=1 | b | 3 | 1/3 (0.06–0.79) | >1000 | >1000 (3/3) | - | >1000 |" in text


def test_abruptness_per_family_pools_the_rungs_cells():
    share = {"abrupt_cells": 3, "cells_with_transition": 4, "median_transition_share": 0.1}
    cell_rows = pd.DataFrame([
        {"mixer": "a", "family": "mqar", **share, "abrupt_cells_rule": 3, "cells_with_drop": 4, "median_decades": 0.1,
         "median_transition_share": 0.1},
        {"mixer": "a", "family": "mqar", **share, "abrupt_cells_rule": 0, "cells_with_drop": 2, "median_decades": None,
         "median_transition_share": 0.7},
        {"mixer": "a", "family": "mqar", **share, "abrupt_cells_rule": 1, "cells_with_drop": 2, "median_decades": 0.2,
         "median_transition_share": 0.2},
        {"mixer": "a", "family": "dyck", "abrupt_cells": None, "cells_with_transition": None,
         "median_transition_share": None, "abrupt_cells_rule": None, "cells_with_drop": None, "median_decades": None}])
    # By the rule: 4 of 8 cells, the median of the rungs' median widths (0.15 decades), then the share.
    assert rank_tables.family_abruptness(cell_rows) == {("a", "dyck"): "-",
                                                        ("a", "mqar"): "4/8 (0.15 dec; share 0.20)"}
    assert "## Abruptness per task family" in rank_tables.to_markdown(rank.build(ladder_records()))


def test_ties_within_the_margin_and_a_clear_winner():
    # Equal success with 3 seeds: a tie. 20 seeds each, 20/20 against 2/20: not a tie.
    tied = seeds("a", "mqar", 4, [10, 10, None]) + seeds("b", "mqar", 4, [None, 10, 10])
    ranking = rank.build(tied)["ranking"]
    assert list(ranking["rank"]) == [1, 1] and ranking["tied_with"][1] == "a"
    clear = seeds("a", "mqar", 4, [10] * 20) + seeds("b", "mqar", 4, [10, 10] + [None] * 18)
    ranking = rank.build(clear)["ranking"]
    assert list(ranking["rank"]) == [1, 2] and ranking["tied_with"][1] is None
    # A chain: b is within the margin of a, c of b, but not of a: c starts a rank of its own.
    chain = (seeds("a", "mqar", 4, [10] * 12) + seeds("b", "mqar", 4, [10] * 9 + [None] * 3)
             + seeds("c", "mqar", 4, [10] * 6 + [None] * 6))
    ranking = rank.build(chain)["ranking"]
    assert list(ranking["mixer"]) == ["a", "b", "c"]
    assert list(ranking["rank"]) == [1, 1, 3] and list(ranking["tied_with"]) == [None, "a", None]


def test_failed_runs_are_left_out_and_a_missing_rung_scores_zero():
    records = (seeds("a", "dyck", 2, [5, 5], axis="max_depth") + [row("a", "dyck", 2, 9, None, status="failed",
                                                                       axis="max_depth")]
               + seeds("a", "dyck", 4, [5, 5], axis="max_depth") + seeds("b", "dyck", 2, [5, 5], axis="max_depth"))
    ranked = rank.build(records)
    cells = ranked["cells"].set_index(["mixer", "rung"])
    assert cells.loc[("a", 2), "failed"] == 1 and cells.loc[("a", 2), "success_rate"] == 1.0
    families = ranked["families"].set_index("mixer")
    assert families.loc["b", "missing_rungs"] == [4] and families.loc["b", "area"] == 0.5


def test_two_varying_task_keys_need_a_named_ladder():
    records = [row("a", "mqar", p, s, 10, axis="pairs", extra_task={"vocab_size": 16 * p}) for p in (4, 8)
               for s in range(2)]
    with pytest.raises(ConfigError, match="--rung mqar=KEY"):
        rank.build(records)
    assert rank.build(records, {"mqar": "task.pairs"})["ladders"]["mqar"]["axis"] == "task.pairs"
    with pytest.raises(ConfigError, match="does not vary"):
        rank.build(records, {"mqar": "task.queries"})


def test_write_puts_markdown_csv_and_json_next_to_the_results(tmp_path):
    for r in ladder_records():
        folder = tmp_path / r["run_id"]
        folder.mkdir()
        (folder / "result.json").write_text(json.dumps(r))
    rank.write(tmp_path)
    assert (tmp_path / "rank.md").read_text().startswith("## Ranking")
    assert (tmp_path / "rank.csv").read_text().splitlines()[0].startswith("rank,mixer,score")
    data = json.loads((tmp_path / "rank.json").read_text())
    assert set(data) == {"ladders", "baseline", "ranking", "families", "cells", "held_plateau", "first_drop", "lr",
                         "learning_speed", "tuning", "reference"}
    assert len(data["cells"]) == 6 and data["baseline"] is None  # no transformer among a, b: no plateau ratio


def test_rank_command_prints_the_ranking_and_refuses_a_bad_rung(tmp_path, capsys):
    from emergence_bench.cli import main

    for r in ladder_records():
        (tmp_path / r["run_id"]).mkdir()
        (tmp_path / r["run_id"] / "result.json").write_text(json.dumps(r))
    assert main(["rank", str(tmp_path)]) == 0
    assert "| 1 | a | - | 1000 | - | 0.67 ± 0.13 | - | 0.667 |" in capsys.readouterr().out
    # --baseline: b's plateau ends over a's. b's median is never reached: at rung 1 over a's 120 (a
    # lower bound, 1000 / 120), at rung 2 over 400 (2.5); rung 3, where neither's is, is left out.
    assert main(["rank", str(tmp_path), "--baseline", "a"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | a | - | 1000 | - | 0.67 ± 0.13 | 1 (baseline) |" in out
    assert f"| 2 | b | - | 1000 | - | 0.11 ± 0.14 | >{(1000 / 120 * 2.5) ** 0.5:.2g}× [" in out
    assert "| linear_map | task.sparsity=1 | b | 3 | 1/3 (0.06–0.79) | >1000 | >1000 (3/3) | >8.3× [" in out
    assert main(["rank", str(tmp_path), "--baseline", "transformer"]) == 2
    assert main(["rank", str(tmp_path), "--rung", "linear_map"]) == 2
    assert "FAMILY=KEY" in capsys.readouterr().err
    assert main(["rank", str(tmp_path), "--rung", "linear_map=state_size"]) == 2
    assert "does not vary" in capsys.readouterr().err


def with_curve(record: dict, held_until: int | None) -> dict:
    """``record`` as schema 2 wrote it (its plateau section the first drop, as ``end_step``) with a
    recorded train-loss curve: ln 2 → 0.4 by step 50, held there, then a sharp drop at ``held_until``
    (None: held to the budget). Read back, its held plateau comes from the curve."""
    curve = [[t, 0.69 if t < 50 else 0.4 if held_until is None or t < held_until else 0.01]
             for t in range(9, BUDGET, 10)]
    first_drop = record["plateau"]["first_drop_step"]
    return {**record, "schema_version": 2, "plateau": {"end_step": first_drop, "censored": first_drop is None},
            "curves": {"train_loss": curve}, "task_facts": {"chance_loss": 0.693, "floor_loss": 0.0}}


def test_rank_prints_the_held_plateau_and_the_first_drop_under_their_names(tmp_path, capsys):
    """The ranking's ratio is the held plateau's (named so, in rank.md, rank.json and the printed
    tables); the first drop has its own column per cell. A schema 2 row, whose plateau section timed
    the first drop, is read with its held plateau from its curve."""
    from emergence_bench.cli import main

    records = ladder_records()
    records = [with_curve(r, 700) if (r["config"]["mixer"]["name"], r["config"]["task"]["sparsity"]) == ("a", 1)
               else r for r in records]
    for r in records:
        (tmp_path / r["run_id"]).mkdir()
        (tmp_path / r["run_id"] / "result.json").write_text(json.dumps(r))
    assert main(["rank", str(tmp_path), "--baseline", "a"]) == 0
    out = capsys.readouterr().out
    assert "plateau ratio [95%]" in out and "first-drop ratio" not in out
    assert "| median emergence | plateau: median end (worth the name) | plateau ratio | median first drop |" in out
    assert "| linear_map | task.sparsity=1 | a | 3 | 3/3 (0.44–1.00) | 120 | 699 (3/3) | - | 120 |" in out
    assert "| linear_map | task.sparsity=2 | a | 3 | 3/3 (0.44–1.00) | 400 | 400 (3/3) | - | 400 |" in out
    data = json.loads((tmp_path / "rank.json").read_text())
    assert "held_plateau" in data and "first_drop" in data and "held_plateau_ratio" in data["ranking"][0]


def test_a_rank_json_written_before_the_rename_reads_under_the_new_names(tmp_path):
    from emergence_bench.reporting.rows_to_rank import saved_rank

    old = {"ladders": {}, "ranking": [{"mixer": "a", "plateau_ratio": 1.5, "plateau_low": 1.0}],
           "cells": [{"mixer": "a", "median_plateau_end": 40}], "plateau": [{"mixer": "a", "ratio": 1.5}]}
    (tmp_path / "rank.json").write_text(json.dumps(old))
    data = saved_rank(tmp_path)
    assert data["ranking"] == [{"mixer": "a", "first_drop_ratio": 1.5, "first_drop_low": 1.0}]
    assert data["cells"] == [{"mixer": "a", "median_first_drop": 40}] and data["first_drop"] == old["plateau"]


def ranking_section(records, page) -> bool:
    """The report's ranking section (tables, ladder figure and its parts) drawn into ``page``, as the
    report's loop over its figures draws it; whether the results held a ladder."""
    from emergence_bench.reporting.figure import REGISTRY, Results, show
    from emergence_bench.reporting.figures import FIGURES  # noqa: F401  (registers the figures)

    return show(page, REGISTRY["ranking"], Results(records))


def test_the_report_gets_a_ranking_section_only_for_a_ladder():
    from emergence_bench.reporting.page import Page

    page = Page()
    assert ranking_section(ladder_records(), page)
    assert page.sections[0][1] == "Ranking" and page.parts[-1].startswith("<img")
    assert "<td>a</td>" in page.parts[1] and "<td>2 [&lt;first, 3]</td>" in page.parts[3]
    one_rung = seeds("a", "mqar", 4, [10, None]) + seeds("b", "mqar", 4, [10, 10])
    assert not ranking_section(one_rung, Page())  # nothing to draw against
    ambiguous = [row("a", "mqar", p, s, 10, axis="pairs", extra_task={"vocab_size": 16 * p}) for p in (4, 8)
                 for s in range(2)]
    assert not ranking_section(ambiguous, Page())


# The ladders, frozen: a change here is a new ladder version (new presets), never an edit, so that
# scores stay comparable across releases.
LADDER_V1 = {"linear_map": ("task.sparsity", [1, 2, 4]), "cellular_automata": ("task.state_size", [4, 8, 16]),
             "mqar": ("task.pairs", [2, 4, 8]), "dyck": ("task.max_depth", [1, 2, 4])}
MIXERS_V1 = {"transformer", "mlp_mixer", "mamba", "gated_deltanet", "rwkv7"}
LADDER_V2 = {"linear_map": ("task.sparsity", [1, 2, 3]), "cellular_automata": ("task.rules", [2, 3, 4]),
             "mqar": ("task.pairs", [1, 2, 4]), "dyck": ("task.length", [16, 32, 64])}
# Everything else a v2 cell holds fixed (the rung's own key aside): the task around each rung.
TASKS_V2 = {"linear_map": {"state_size": 10, "trajectory_length": 2, "batch_size": 32},
            "cellular_automata": {"state_size": 8, "colors": 2, "radius": 1, "trajectory_length": 4, "batch_size": 32},
            "mqar": {"vocab_size": 16, "queries": 1, "batch_size": 32},
            "dyck": {"bracket_types": 2, "max_depth": 8, "batch_size": 32}}
# Ladder v3: v2's but for Dyck, whose rung is the number of bracket types at length 32, scored on closers.
LADDER_V3 = {**LADDER_V2, "dyck": ("task.bracket_types", [2, 4, 8])}
TASKS_V3 = {**TASKS_V2, "dyck": {"length": 32, "max_depth": 8, "batch_size": 32, "score": "closers"}}
BUILT_IN = {"transformer", "mlp_mixer", "mamba", "gated_deltanet", "rwkv7", "mlstm", "lru"}


def ladder_cells(preset: str, ladder: dict) -> tuple[dict, list[dict]]:
    """(family, mixer, rung) -> its seeds, and the raw configs, of a preset checked against ``ladder``."""
    from emergence_bench.execution.sweep_spec import load_sweep

    raw = [config for _, config in load_sweep(preset).raw_runs()]
    found = rank.ladders([{"config": config, "status": "ok"} for config in raw])
    assert {f: (ladder["axis"], ladder["rungs"]) for f, ladder in found.items()} == ladder
    assert len({c["model"]["d_model"] for c in raw}) == 1  # matched width
    cells = {}
    for c in raw:
        family = c["task"]["name"]
        cells.setdefault((family, c["mixer"]["name"], c["task"][ladder[family][0].split(".")[1]]), set()).add(c["seed"])
    return cells, raw


@pytest.mark.parametrize("preset", ["standard-cpu-v1", "standard-v1"])
def test_v1_presets_hold_ladder_v1_for_every_mixer_and_seed(preset):
    cells, raw = ladder_cells(preset, LADDER_V1)
    assert {c["mixer"]["name"] for c in raw} == MIXERS_V1
    assert len({len(s) for s in cells.values()}) == 1 and min(len(s) for s in cells.values()) >= 3
    assert len(cells) == len(LADDER_V1) * 3 * len(MIXERS_V1)


@pytest.mark.parametrize("preset, ladder, tasks, eval_every", [
    ("standard-cpu-v2-tuned", LADDER_V2, TASKS_V2, 50), ("standard-cpu-v2", LADDER_V2, TASKS_V2, 50),
    ("standard-v2", LADDER_V2, TASKS_V2, 50), ("standard-cpu", LADDER_V3, TASKS_V3, 25)])
def test_standard_presets_hold_their_ladder_for_all_seven_mixers_and_eight_seeds(preset, ladder, tasks, eval_every):
    from emergence_bench.execution.sweep_spec import load_sweep

    cells, raw = ladder_cells(preset, ladder)
    assert {c["mixer"]["name"] for c in raw} == BUILT_IN
    assert len(cells) == len(ladder) * 3 * len(BUILT_IN)
    assert {len(s) for s in cells.values()} == {16 if preset == "standard-v2" else 8}
    for c in raw:
        family = c["task"]["name"]
        assert {k: c["task"][k] for k in tasks[family]} == tasks[family], family
        assert c["trainer"]["eval_every"] == eval_every
        if c["mixer"]["name"] == "gated_deltanet":  # v2's rows ran chunks of 32; v3 runs today's default
            assert c["mixer"].get("chunk_size") == (None if preset == "standard-cpu" else 32)
    sweep = load_sweep(preset)
    assert sweep.seed_parallel == len(next(iter(cells.values())))  # a cell's seeds train as one batched model


def test_the_two_reproducibility_seed_sets_are_disjoint_from_the_pilot_and_each_other():
    # standard-cpu trains seeds 0-7; its reproduction, seeds 8-15 (`--grid seed=8,...,15`); the pilot
    # that chose the rungs used seeds 100-103.
    from emergence_bench.execution.sweep_spec import load_sweep

    seeds = {c["seed"] for _, c in load_sweep("standard-cpu").raw_runs()}
    assert seeds == set(range(8)) and not seeds & set(range(8, 16)) and not seeds & set(range(100, 104))


def test_the_report_compares_mixers_against_the_transformer_with_survival_forest_and_state_figures():
    from emergence_bench.reporting.figures import comparison
    from emergence_bench.reporting.page import Page

    names, state_sizes = {"a": "transformer", "b": "lru"}, {"a": 40, "b": 8}
    records = [dict(r, config={**r["config"], "mixer": {"name": names[r["config"]["mixer"]["name"]]}},
                    state_size=state_sizes[r["config"]["mixer"]["name"]]) for r in ladder_records()]
    page = Page()
    assert ranking_section(records, page)
    titles = [title for _, title in page.sections]
    assert titles == ["Ranking", "Survival by rung", "Plateau ratio", "State size and quality"]
    ranked = rank.build(records)
    assert ranked["baseline"] == "transformer" and list(ranked["ranking"]["state_size"]) == [40, 8]
    # The survival figure: one panel per (family, rung) and kind; each mixer's curve starts at 1 and
    # ends where its KM curve does (transformer at rung 1: every seed emerged, so 0).
    figure = comparison.survival_figure(ranked, records)
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert len(panels) == 2 * 3
    first = panels[0].get_lines()
    assert {line.get_label() for line in first} == {"transformer", "lru"}
    transformer = next(line for line in first if line.get_label() == "transformer")
    assert transformer.get_ydata()[0] == 1 and transformer.get_ydata()[-1] == 0
    # Without state sizes (older results) that figure is listed as not drawn, with the reason.
    page = Page()
    assert ranking_section([{k: v for k, v in r.items() if k != "state_size"} for r in records], page)
    assert [name for name, _ in page.missing] == ["tuning", "state"]  # not tuned here: no tuning curves


def test_two_rankings_disagree_only_where_one_puts_a_strictly_above_b_and_the_other_strictly_below():
    def table(ranks: dict) -> pd.DataFrame:
        return pd.DataFrame({"mixer": list(ranks), "rank": list(ranks.values())})

    first = table({"a": 1, "b": 1, "c": 3, "d": 4})
    assert rank.disagreements(first, table({"a": 2, "b": 1, "c": 3, "d": 3})) == []  # ties agree with anything
    assert rank.disagreements(first, table({"a": 1, "b": 2, "c": 4, "d": 3})) == [("c", "d")]
    assert rank.disagreements(first, table({"a": 1, "e": 2})) == []  # only mixers both rankings hold


def test_a_count_beside_a_missing_value_prints_as_a_count():
    # A plugin that does not state its state size makes the column float (pandas): 2816 stays 2816.
    from emergence_bench.reporting.rank_tables import _value

    assert [_value(v) for v in (2816.0, 37036, 0.708, None, float("nan"))] == ["2816", "37036", "0.708", "-", "-"]


def test_a_learning_speed_family_leaves_the_score_for_its_own_table(tmp_path):
    """A family declared learning speed (DIR/ladder.json, as a sweep of such a preset writes it) is out
    of the success score and shown in its own table; the other families' score is unchanged."""
    from emergence_bench.results.store import write_ladder

    records = ladder_records() + seeds("a", "dyck", 2, [None] * 3) + seeds("b", "dyck", 2, [100] * 3)
    mixed = rank.build(records)["ranking"].set_index("mixer")
    assert mixed.loc["a", "score"] == pytest.approx((2 / 3 + 0) / 2)  # both families in the score
    ranked = rank.build(records, learning_speed=["dyck"])
    ranking = ranked["ranking"].set_index("mixer")
    assert ranking.loc["a", "score"] == pytest.approx(2 / 3) and ranking.loc["b", "score"] == pytest.approx(1 / 9)
    assert ranking.loc["b", "area:dyck"] == 1  # still measured, outside the score
    text = rank_tables.to_markdown(ranked)
    assert "## Learning speed (not in the score)" in text and "| mixer | dyck area |" in text
    assert "| b | 1 |" in text and "dyck area" not in text.split("## Learning speed")[0]
    assert rank.build(records, learning_speed=["dyck", "linear_map"])["learning_speed"] == []  # all: none apart
    for r in records:
        (tmp_path / r["run_id"]).mkdir()
        (tmp_path / r["run_id"] / "result.json").write_text(json.dumps(r))
    write_ladder(tmp_path, "toy", "toy-v1", ["dyck"])
    written, _ = rank.write(tmp_path)
    assert written["learning_speed"] == ["dyck"]
    assert json.loads((tmp_path / "rank.json").read_text())["learning_speed"] == ["dyck"]
    (tmp_path / "ladder.json").write_text("{not json")
    with pytest.raises(ConfigError, match="ladder.json: not a ladder file"):
        rank.write(tmp_path)


def test_a_sweep_file_names_its_learning_speed_families(tmp_path):
    from emergence_bench.execution.sweep_spec import load_sweep

    spec = {"name": "s", "base": {"task": {"name": "linear_map"}},
            "groups": [{"name": "a", "base": {"task": {"name": "dyck"}}}, {"name": "b"}]}
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({**spec, "learning_speed": ["dyck"]}))
    assert load_sweep(str(path)).learning_speed == ["dyck"]
    path.write_text(json.dumps({**spec, "learning_speed": ["mqar"]}))
    with pytest.raises(ConfigError, match=r"learning_speed names \['mqar'\], not a task family"):
        load_sweep(str(path))
    path.write_text(json.dumps({**spec, "learning_speed": "dyck"}))
    with pytest.raises(ConfigError, match="must be a list of task family names"):
        load_sweep(str(path))
    # a preset still to be tuned (no `tuned:` values yet) names its families all the same, and so do
    # groups given as a grid of whole tasks
    tuning = {"seeds": [100], "grid": {"optim.lr": [1e-3, 3e-3]}}
    path.write_text(json.dumps({**spec, "learning_speed": ["dyck"], "tuning": tuning}))
    assert load_sweep(str(path)).learning_speed == ["dyck"]
    path.write_text(json.dumps({**spec, "learning_speed": ["mqar"], "tuning": tuning,
                                "groups": [{"name": "a", "grid": {"task": [{"name": "mqar"}, {"name": "dyck"}]}}]}))
    assert load_sweep(str(path)).families() == {"mqar", "dyck"}


def test_a_cell_of_two_budgets_or_settings_is_refused_naming_them_and_instances_are_pooled():
    """A folder holding a rerun at another budget: a cell's success rate over both budgets means
    neither, so rank names the cell and the budgets instead of pooling them; across mixers too (each
    mixer of a rung at its own budget). Seeds and task instances (task.task_seed, once --rung names
    the ladder) are a cell's replicates, pooled."""
    longer = [dict(r, run_id=r["run_id"] + "-long", config={**r["config"], "trainer": {"max_steps": 2 * BUDGET}})
              for r in seeds("a", "linear_map", 2, [200, 300])]
    with pytest.raises(ConfigError, match=r"the cell a · linear_map sparsity=2 mixes runs of two settings "
                                          r"\(trainer.max_steps=1000: 3 runs, trainer.max_steps=2000: 2 runs\)"):
        rank.build(ladder_records() + longer)
    lrs = [dict(r, run_id=f"{r['run_id']}-{lr}", config={**r["config"], "optim": {"lr": lr}})
           for lr, n in ((0.001, 3), (0.01, 2)) for r in seeds("a", "linear_map", 1, [100] * n)]
    with pytest.raises(ConfigError, match=r"\(optim.lr=0.001: 3 runs, optim.lr=0.01: 2 runs\)"):
        rank.build(lrs)
    b_longer = [dict(r, config={**r["config"], "trainer": {"max_steps": 2 * BUDGET}})
                for r in ladder_records() if r["config"]["mixer"]["name"] == "b"]
    with pytest.raises(ConfigError, match=r"the mixers of linear_map sparsity=1 trained for different budgets "
                                          r"\(trainer.max_steps=1000: a; trainer.max_steps=2000: b\)"):
        rank.build([r for r in ladder_records() if r["config"]["mixer"]["name"] == "a"] + b_longer)
    instances = [dict(r, run_id=r["run_id"] + "-i1",
                      config={**r["config"], "task": {**r["config"]["task"], "task_seed": 1}})
                 for r in ladder_records()]
    pooled = rank.build(ladder_records() + instances, {"linear_map": "task.sparsity"})
    assert pooled["cells"]["seeds"].tolist() == [6] * 6


def test_a_mixer_at_per_family_settings_is_one_mixer_and_variants_within_a_family_stay_apart():
    """Ladder v4 gives the Transformer heads of 8 on the linear map and heads of 32 elsewhere: one mixer,
    ranked over both families. Two head settings within one family are two mixers, labelled apart."""
    def at(records: list[dict], **section) -> list[dict]:
        for r in records:
            r["config"]["mixer"] = {**r["config"]["mixer"], **section}
        return records

    ladder = (at(seeds("t", "linear_map", 1, [100, 100]) + seeds("t", "linear_map", 2, [200, None]), n_heads=8)
              + at(seeds("t", "mqar", 1, [100, 100], axis="pairs") + seeds("t", "mqar", 2, [None, None], axis="pairs"),
                   n_heads=2))
    ranked = rank.build(ladder)
    assert list(ranked["ranking"]["mixer"]) == ["t"]
    assert ranked["ranking"]["score"][0] == pytest.approx((0.75 + 0.5) / 2)

    variants = (at(seeds("t", "mqar", 1, [100, 100], axis="pairs"), n_heads=2)
                + at(seeds("t", "mqar", 1, [None, None], axis="pairs"), n_heads=4))
    assert sorted(rank.build(variants)["ranking"]["mixer"]) == ["t(n_heads=2)", "t(n_heads=4)"]
